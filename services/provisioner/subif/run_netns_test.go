package subif

// The manager's inventory on the host kernel, in a throwaway host netns:
// the devices follow their parent's state and MTU, a vanished parent's
// devices are down, and a parent holding the default route is withheld
// unless its entry allows it. Setup reads the parent: its MTU bounds the
// claim's, a missing one is refused.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

type runWorld struct {
	m    *Manager
	h    *netlink.Handle
	last chan []*devicev1.Device
}

func newRunWorld(t *testing.T, parents ...*provisionerv1.SubifParent) *runWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and links in them")
	path := netnstest.New(t)
	w := &runWorld{h: netnstest.Handle(t, path), last: make(chan []*devicev1.Device, 100)}
	netnstest.AddVeth(t, w.h, netnstest.Veth{Name: "eth1", Peer: "eth1p", MTU: 9000})
	netnstest.AddVeth(t, w.h, netnstest.Veth{Name: "up0", Peer: "up0p"})
	var err error
	if w.m, err = New(nil, &provisionerv1.SubifConfig{Enabled: true, Parents: parents}, WithNetns(path), WithResync(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.m.Run(ctx, func(d []*devicev1.Device) { w.last <- d }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v", err)
		}
	})
	return w
}

// await waits for a publication for which ok holds.
func (w *runWorld) await(t *testing.T, what string, ok func([]*devicev1.Device) bool) []*devicev1.Device {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case d := <-w.last:
			if ok(d) {
				return d
			}
		case <-timeout:
			t.Fatalf("no publication with %s", what)
		}
	}
}

func states(devs []*devicev1.Device) map[string]devicev1.LinkState {
	out := map[string]devicev1.LinkState{}
	for _, d := range devs {
		out[d.GetName()] = d.GetLinkState()
	}
	return out
}

func TestRun_ParentHealth(t *testing.T) {
	w := newRunWorld(t, &provisionerv1.SubifParent{Name: "mv", ParentIfName: "eth1", Kind: macvlan, Count: 2})
	up, down := devicev1.LinkState_LINK_STATE_UP, devicev1.LinkState_LINK_STATE_DOWN
	devs := w.await(t, "two devices up", func(d []*devicev1.Device) bool {
		s := states(d)
		return len(d) == 2 && s["mv-0"] == up && s["mv-1"] == up
	})
	if devs[0].GetMtu() != 9000 || devs[0].GetSubInterface().GetParentIfName() != "eth1" {
		t.Errorf("device %v: want the parent's MTU 9000 and eth1", devs[0])
	}
	steps := []struct {
		what string
		do   func() error
		want devicev1.LinkState
	}{
		{"parent without carrier", func() error { return w.h.LinkSetDown(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1p"}}) }, down},
		{"carrier back", func() error { return w.h.LinkSetUp(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1p"}}) }, up},
		{"parent administratively down", func() error { return w.h.LinkSetDown(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}}) }, down},
		{"parent gone", func() error { return w.h.LinkDel(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}}) }, down},
	}
	for _, s := range steps {
		l, _ := w.h.LinkByName("eth1")
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v (%v)", s.what, err, l)
		}
		w.await(t, s.what, func(d []*devicev1.Device) bool {
			st := states(d)
			return len(d) == 2 && st["mv-0"] == s.want && st["mv-1"] == s.want
		})
	}
	_, err := w.m.Setup(t.Context(), devs[0], nil, "")
	if !errors.Is(err, ErrParentNotFound) {
		t.Errorf("Setup with the parent gone = %v, want ErrParentNotFound", err)
	}
}

func TestRun_DefaultRoute(t *testing.T) {
	w := newRunWorld(t,
		&provisionerv1.SubifParent{Name: "a", ParentIfName: "up0", Kind: macvlan, Count: 1},
		&provisionerv1.SubifParent{Name: "b", ParentIfName: "up0", Kind: macvlan, Count: 1, AllowDefaultRoute: true},
		&provisionerv1.SubifParent{Name: "c", ParentIfName: "eth1", Kind: macvlan, Count: 1})
	w.await(t, "three devices", func(d []*devicev1.Device) bool { return len(d) == 3 })
	up0, err := w.h.LinkByName("up0")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.h.AddrAdd(up0, mustAddr(t, "192.0.2.1/24")); err != nil {
		t.Fatal(err)
	}
	if err := w.h.RouteAdd(&netlink.Route{Gw: mustAddr(t, "192.0.2.254/32").IP}); err != nil {
		t.Fatal(err)
	}
	devs := w.await(t, "a withheld", func(d []*devicev1.Device) bool { return len(d) == 2 })
	if devs[0].GetName() != "b-0" || devs[1].GetName() != "c-0" {
		t.Errorf("published %v, want b-0 (allowDefaultRoute) and c-0", devs)
	}
	dev := w.m.byName["a"].device(0, 1500, devicev1.LinkState_LINK_STATE_UP)
	if _, err := w.m.Setup(t.Context(), dev, nil, ""); !errors.Is(err, hostdev.ErrDefaultRoute) {
		t.Errorf("Setup of a-0 = %v, want ErrDefaultRoute", err)
	}
	pd, err := w.m.Setup(t.Context(), devs[0], &devicev1.DeviceConfig{Mtu: 1500}, "")
	if err != nil {
		t.Fatalf("Setup of b-0 = %v", err)
	}
	if pd.GetOriginalLink().GetMtu() != 1500 || !pd.GetLinkCreated() || pd.GetOriginalLink().GetName() != "b-0" {
		t.Errorf("prepared %v, want link b-0 created in the pod, the parent's MTU", pd)
	}
}

func mustAddr(t *testing.T, s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return a
}
