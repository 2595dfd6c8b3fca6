package hookargs

import (
	"slices"
	"testing"
)

func TestArgs(t *testing.T) {
	if got, want := CheckNetnsArgs("/opt/netdra/bin/netdra-hook", "net1", "net2"),
		[]string{"netdra-hook", "check-netns", "-ifname", "net1", "-ifname", "net2"}; !slices.Equal(got, want) {
		t.Errorf("CheckNetnsArgs = %q, want %q", got, want)
	}
	if got, want := WaitAttachedArgs("/opt/netdra/bin/netdra-hook", "/run/netdra/gate.sock", "uid1", "/var/run/netns/p1"),
		[]string{"netdra-hook", "wait-attached", "-socket", "/run/netdra/gate.sock", "-pod", "uid1", "-netns", "/var/run/netns/p1"}; !slices.Equal(got, want) {
		t.Errorf("WaitAttachedArgs = %q, want %q", got, want)
	}
}
