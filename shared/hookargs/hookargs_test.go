package hookargs

import (
	"slices"
	"testing"
)

func TestArgs(t *testing.T) {
	if got, want := CheckNetnsArgs("/opt/netdra/bin/netdra-hook", "", "net1", "net2"),
		[]string{"netdra-hook", "check-netns", "-ifname", "net1", "-ifname", "net2"}; !slices.Equal(got, want) {
		t.Errorf("CheckNetnsArgs = %q, want %q", got, want)
	}
	gated := CheckNetnsArgs("/opt/netdra/bin/netdra-hook", "/run/netdra-gate/nri.sock", "net1")
	if want := []string{"netdra-hook", "check-netns", "-socket", "/run/netdra-gate/nri.sock", "-ifname", "net1"}; !slices.Equal(gated, want) {
		t.Errorf("CheckNetnsArgs with a socket = %q, want %q", gated, want)
	}
	if got, want := WaitAttachedArgs("/opt/netdra/bin/netdra-hook", "/run/netdra/gate.sock", "uid1", "/var/run/netns/p1"),
		[]string{"netdra-hook", "wait-attached", "-socket", "/run/netdra/gate.sock", "-pod", "uid1", "-netns", "/var/run/netns/p1"}; !slices.Equal(got, want) {
		t.Errorf("WaitAttachedArgs = %q, want %q", got, want)
	}
	for _, tc := range []struct {
		argv []string
		want bool
	}{
		{gated, true},
		{CheckNetnsArgs("/h", "", "net1"), false},
		{WaitAttachedArgs("/h", "/s", "u", "/n"), false},
		{[]string{"other-hook", "-socket", "/s"}, false},
		{nil, false},
	} {
		if got := WaitsOnGate(tc.argv); got != tc.want {
			t.Errorf("WaitsOnGate(%q) = %v, want %v", tc.argv, got, tc.want)
		}
	}
}
