package hostdev

// The privileged tests never touch the real host namespace: each creates a
// throwaway named namespace, makes veth links in it and tells the Manager
// it is the host's (WithNetns). Device details come from fake sysfs trees.

import (
	"context"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// waitLimit bounds how long a test waits for the inventory to reach a
// state, so that a broken watch fails instead of hanging. It is no
// statement about speed.
const waitLimit = 30 * time.Second

// testNs is a throwaway "host" namespace and a netlink handle in it.
type testNs struct {
	path string
	h    *netlink.Handle
}

func newTestNs(t *testing.T) *testNs {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	path := netnstest.New(t)
	return &testNs{path: path, h: netnstest.Handle(t, path)}
}

// addVeth creates the veth pair name/peer, both up.
func (n *testNs) addVeth(t *testing.T, name, peer string) {
	t.Helper()
	netnstest.AddVeth(t, n.h, netnstest.Veth{Name: name, Peer: peer})
}

// addBridge creates the bridge name, up, with port as its port.
func (n *testNs) addBridge(t *testing.T, name, port string) {
	t.Helper()
	if err := n.h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}}); err != nil {
		t.Fatalf("adding bridge %s: %v", name, err)
	}
	br := n.link(t, name)
	if err := n.h.LinkSetMaster(n.link(t, port), br); err != nil {
		t.Fatalf("adding %s to %s: %v", port, name, err)
	}
	if err := n.h.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
}

// addMacvlan creates the macvlan link name on lower, up.
func (n *testNs) addMacvlan(t *testing.T, name, lower string) {
	t.Helper()
	mv := &netlink.Macvlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: n.link(t, lower).Attrs().Index}, Mode: netlink.MACVLAN_MODE_BRIDGE}
	if err := n.h.LinkAdd(mv); err != nil {
		t.Fatalf("adding macvlan %s on %s: %v", name, lower, err)
	}
	if err := n.h.LinkSetUp(n.link(t, name)); err != nil {
		t.Fatal(err)
	}
}

func (n *testNs) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := n.h.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

func (n *testNs) delLink(t *testing.T, name string) {
	t.Helper()
	if err := n.h.LinkDel(n.link(t, name)); err != nil {
		t.Fatalf("deleting %s: %v", name, err)
	}
}

// defaultRoute is an IPv4 (0.0.0.0/0 via 192.0.2.254, with 192.0.2.1/24
// on the link) or IPv6 (::/0 via fe80::1) default route through a link, with
// a metric of its own so that several links can hold one.
func (n *testNs) defaultRoute(t *testing.T, link string, v6 bool) *netlink.Route {
	t.Helper()
	l := n.link(t, link)
	if v6 {
		return &netlink.Route{LinkIndex: l.Attrs().Index, Dst: zeroPrefix(netlink.FAMILY_V6), Gw: net.ParseIP("fe80::1"), Priority: 100 + l.Attrs().Index}
	}
	addr, err := netlink.ParseAddr("192.0.2.1/24")
	if err != nil {
		t.Fatal(err)
	}
	if err := n.h.AddrReplace(l, addr); err != nil {
		t.Fatalf("adding %s to %s: %v", addr, link, err)
	}
	return &netlink.Route{LinkIndex: l.Attrs().Index, Dst: zeroPrefix(netlink.FAMILY_V4), Gw: net.ParseIP("192.0.2.254"), Priority: 100 + l.Attrs().Index}
}

func (n *testNs) addDefaultRoute(t *testing.T, link string, v6 bool) *netlink.Route {
	t.Helper()
	r := n.defaultRoute(t, link, v6)
	if err := n.h.RouteAdd(r); err != nil {
		t.Fatalf("adding default route via %s: %v", link, err)
	}
	return r
}

// recorder runs a Manager and keeps what it publishes.
type recorder struct {
	mu     sync.Mutex
	latest []*devicev1.Device
	count  int
	// all is every publication, in order.
	all [][]*devicev1.Device
}

// startRun runs m until the test ends, when Run must return nil.
func startRun(t *testing.T, m *Manager) *recorder {
	t.Helper()
	r := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- m.Run(ctx, func(devs []*devicev1.Device) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.latest = devs
			r.count++
			r.all = append(r.all, devs)
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run() = %v after cancel, want nil", err)
		}
	})
	return r
}

func (r *recorder) get() ([]*devicev1.Device, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest, r.count
}

// waitNames waits until the latest inventory holds exactly the devices
// named want (in name order) and returns it.
func (r *recorder) waitNames(t *testing.T, want ...string) []*devicev1.Device {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	deadline := time.Now().Add(waitLimit)
	for {
		devs, n := r.get()
		got := names(devs)
		if n > 0 && slices.Equal(got, want) {
			return devs
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v and %d publications the inventory is %q, want %q", waitLimit, n, got, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func names(devs []*devicev1.Device) []string {
	n := []string{}
	for _, d := range devs {
		n = append(n, d.GetName())
	}
	return n
}
