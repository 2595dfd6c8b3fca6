package hostdev

import (
	"testing"
	"time"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// waitLinkState waits until the latest inventory reports name in state.
func (r *recorder) waitLinkState(t *testing.T, name string, want devicev1.LinkState) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for {
		devs, _ := r.get()
		var got devicev1.LinkState = -1
		for _, d := range devs {
			if d.GetName() == name {
				got = d.GetLinkState()
			}
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v %s is in link state %v, want %v", waitLimit, name, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRun_LinkState: the published link state follows the link (device
// health): administratively down, up without a carrier (its veth peer
// down), and up, each change published from the link events.
func TestRun_LinkState(t *testing.T) {
	ns := newTestNs(t)
	ns.addVeth(t, "data0", "dpeer0")
	m, err := New(testLogger(t), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"data0"}}, WithNetns(ns.path), WithResync(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	r := startRun(t, m)
	r.waitLinkState(t, "data0", devicev1.LinkState_LINK_STATE_UP)
	steps := []struct {
		link string
		up   bool
		want devicev1.LinkState
	}{
		{"dpeer0", false, devicev1.LinkState_LINK_STATE_DOWN},
		{"data0", false, devicev1.LinkState_LINK_STATE_ADMIN_DOWN},
		{"data0", true, devicev1.LinkState_LINK_STATE_DOWN},
		{"dpeer0", true, devicev1.LinkState_LINK_STATE_UP},
	}
	for _, st := range steps {
		set := ns.h.LinkSetDown
		if st.up {
			set = ns.h.LinkSetUp
		}
		if err := set(ns.link(t, st.link)); err != nil {
			t.Fatal(err)
		}
		r.waitLinkState(t, "data0", st.want)
	}
}
