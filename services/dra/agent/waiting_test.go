package agent

import (
	"slices"
	"strings"
	"testing"
)

// TestWaitingFor: Status says what dra waits for: the peers it cannot
// reach, the NodeConfig until it is applied, then the recovery and the
// kubelet's registration; nothing once registered with every peer reached.
func TestWaitingFor(t *testing.T) {
	peers := []string{"state service (/run/netdra/state.sock): connect: permission denied"}
	a := &Agent{cfg: Config{NodeName: "node-1", Waiting: func() []string { return slices.Clone(peers) }},
		configured: make(chan struct{})}
	got := a.waitingFor(false)
	if len(got) != 2 || got[0] != peers[0] || !strings.Contains(got[1], "NodeConfig node-1") {
		t.Errorf("before the NodeConfig is applied: %q", got)
	}
	close(a.configured)
	got = a.waitingFor(false)
	if len(got) != 2 || !strings.Contains(got[1], "recovery") {
		t.Errorf("applied, not registered: %q", got)
	}
	peers = nil
	if got = a.waitingFor(true); len(got) != 0 {
		t.Errorf("registered, every peer reached: %q", got)
	}
}
