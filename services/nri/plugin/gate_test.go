package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/google/go-cmp/cmp"
)

// TestCreateContainer_Gate: the container of a pod whose devices are all in
// its netns starts at once; one whose sandbox started without them (nri was
// away at RunPodSandbox) gets them attached first; one whose device cannot
// be attached is refused with the reason; a pod without devices and a
// host-network pod are never held.
func TestCreateContainer_Gate(t *testing.T) {
	ctr := &api.Container{Name: "app"}
	for _, tc := range []struct {
		name      string
		w         *world
		pod       *api.PodSandbox
		wantErr   string
		wantCalls []string
	}{
		{name: "devices in place", w: func() *world {
			a := alloc("a", "pod1", attached)
			a.NetnsPath = "/var/run/netns/p1"
			return newWorld(a)
		}(), pod: pod("pod1", "/var/run/netns/p1")},
		{name: "sandbox started without them", w: newWorld(alloc("a", "pod1", prepared), alloc("b", "pod1", prepared)),
			pod: pod("pod1", "/var/run/netns/p1"), wantCalls: []string{
				"provisioner.Attach a /var/run/netns/p1 net-a", "state.MarkAttached a /var/run/netns/p1",
				"provisioner.Attach b /var/run/netns/p1 net-b", "state.MarkAttached b /var/run/netns/p1"}},
		{name: "attach fails: refused", w: func() *world {
			w := newWorld(alloc("a", "pod1", prepared))
			w.failAttach["a"] = errors.New("link busy")
			return w
		}(), pod: pod("pod1", "/var/run/netns/p1"), wantErr: "device a (claim /): link busy",
			wantCalls: []string{"provisioner.Attach a /var/run/netns/p1 net-a", `state.MarkAttachFailed a "link busy"`}},
		{name: "no devices", w: newWorld(alloc("a", "pod2", prepared)), pod: pod("pod1", "/var/run/netns/p1")},
		{name: "host network", w: newWorld(alloc("a", "pod1", prepared)), pod: pod("pod1", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t, tc.w)
			adj, upd, err := p.CreateContainer(context.Background(), tc.pod, ctr)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("CreateContainer: %v, want error %q", err, tc.wantErr)
			}
			if adj != nil || upd != nil {
				t.Errorf("CreateContainer adjusted the container: %v %v", adj, upd)
			}
			if diff := cmp.Diff(perDevice(tc.wantCalls), perDevice(tc.w.takeCalls())); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}
