//go:build !kernelrig

// Sub-interfaces through the service's API on the host kernel (macvlan;
// the host has neither ipvlan nor 802.1q, so ipvlan and VLAN links are the
// kernel rig's: subif_kernel_test.go): the link is created in the pod with the claim's
// settings, traffic flows between two pods' sub-interfaces of one parent,
// Detach deletes it, and no link ever moves (counted from the kernel's own
// notifications). The parent is a veth in a throwaway "host" namespace,
// its peer up in another.

package server

import (
	"errors"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/ebpf/ebpftest"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/link/linktest"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/services/provisioner/subif"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// subifWorld is a provisioner with the subif manager and eBPF, its host
// netns a throwaway one with the parent eth1 (a veth, MTU 9000, up, its
// peer up in a "wire" netns), and two pods.
type subifWorld struct {
	srv                    *Server
	hostPath               string
	pods                   [2]string // netns paths
	hostH                  *netlink.Handle
	podH                   [2]*netlink.Handle
	hostLinksStart         []string
	parentIndex, parentMTU int
}

func newSubifWorld(t *testing.T, parents ...*provisionerv1.SubifParent) *subifWorld {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and links in them")
	host, wire := nodetest.Netns(t, "ndhost"), nodetest.Netns(t, "ndwire")
	w := &subifWorld{hostPath: "/var/run/netns/" + host}
	for i := range w.pods {
		w.pods[i] = "/var/run/netns/" + nodetest.Netns(t, "ndpod")
	}
	nodetest.IP(t, "-n", host, "link", "add", "eth1", "mtu", "9000", "type", "veth", "peer", "name", "wire0", "mtu", "9000", "netns", wire)
	nodetest.IP(t, "-n", wire, "link", "set", "wire0", "up")
	nodetest.IP(t, "-n", host, "link", "set", "eth1", "up")
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	programs, err := ebpf.New(log, ebpftest.BPFFS(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(programs.Close)
	mover, err := link.NewMover(log, link.WithHostNetns(w.hostPath))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	w.srv = New(log, Factories{Subif: func(c *provisionerv1.SubifConfig) (manager.Manager, error) {
		return subif.New(log, c, subif.WithNetns(w.hostPath))
	}}, mover)
	w.srv.SetPrograms(programs, programs)
	t.Cleanup(w.srv.Wait) // the eBPF work Setup and Free leave running
	t.Cleanup(w.srv.Close)
	if _, err := w.srv.Configure(ctxFor(t), subifConfig(parents...)); err != nil {
		t.Fatal(err)
	}
	w.hostH = netnstest.Handle(t, w.hostPath)
	for i, p := range w.pods {
		w.podH[i] = netnstest.Handle(t, p)
	}
	parent, err := w.hostH.LinkByName("eth1")
	if err != nil {
		t.Fatal(err)
	}
	w.parentIndex, w.parentMTU = parent.Attrs().Index, parent.Attrs().MTU
	w.hostLinksStart = netnstest.LinkNames(t, w.hostH)
	return w
}

func (w *subifWorld) device(t *testing.T, name string) *devicev1.Device {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if dev, ok := w.srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, name); ok {
			return dev
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never published", name)
		}
	}
}

// attach sets dev up for pod i with cfg and attaches it.
func (w *subifWorld) attach(t *testing.T, dev *devicev1.Device, i int, cfg *devicev1.DeviceConfig) *devicev1.PreparedDevice {
	t.Helper()
	ctx := ctxFor(t)
	setup, err := w.srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	for range 2 { // idempotent
		if _, err := w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.pods[i], Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	return pd
}

func (w *subifWorld) detach(t *testing.T, pd *devicev1.PreparedDevice, i int, cfg *devicev1.DeviceConfig) {
	t.Helper()
	ctx := ctxFor(t)
	for range 2 {
		if _, err := w.srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.pods[i], Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.srv.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if names := netnstest.LinkNames(t, w.podH[i]); slices.Contains(names, cfg.GetPodIfName()) {
		t.Errorf("%s still in pod %d after Detach: %v", cfg.GetPodIfName(), i, names)
	}
}

// checkLink checks the sub-interface name in pod i (checkSubLink), on
// eth1.
func (w *subifWorld) checkLink(t *testing.T, i int, name, kind string, mtu int, mac string) netlink.Link {
	t.Helper()
	return checkSubLink(t, w.podH[i], name, kind, w.parentIndex, mtu, mac)
}

// TestSubif_Macvlan: two pods get macvlan sub-interfaces (bridge mode) of
// one parent, with the claim's MAC, MTU, addresses and routes, and reach
// each other through it; Detach deletes them. Nothing moves, and the
// host's links are as they were.
func TestSubif_Macvlan(t *testing.T) {
	w := newSubifWorld(t, &provisionerv1.SubifParent{Name: "mv", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN, Count: 2})
	moves := linktest.CountMoves(t, w.hostPath, w.pods[0], w.pods[1])
	dev0 := w.device(t, "mv-0")
	// The parent's carrier comes a moment after it is set up (linkwatch).
	for deadline := time.Now().Add(10 * time.Second); dev0.GetLinkState() != devicev1.LinkState_LINK_STATE_UP && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		dev0 = w.device(t, "mv-0")
	}
	if dev0.GetMtu() != 9000 || dev0.GetLinkState() != devicev1.LinkState_LINK_STATE_UP {
		t.Errorf("mv-0 published with MTU %d and state %v, want the parent's: 9000, up", dev0.GetMtu(), dev0.GetLinkState())
	}
	cfg0 := &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:00:00:00:0a:01", Mtu: 1400, SpoofChk: new(true),
		Addresses: []string{"192.0.2.1/24"}, Routes: []*devicev1.Route{{Destination: "10.0.0.0/8", Gateway: "192.0.2.254"}}}
	cfg1 := &devicev1.DeviceConfig{PodIfName: "net1", Addresses: []string{"192.0.2.2/24"}}
	pd0 := w.attach(t, dev0, 0, cfg0)
	pd1 := w.attach(t, w.device(t, "mv-1"), 1, cfg1)
	w.checkLink(t, 0, "net1", "macvlan", 1400, "02:00:00:00:0a:01")
	l1 := w.checkLink(t, 1, "net1", "macvlan", 9000, pd1.GetOriginalLink().GetMacAddress())
	if mv, ok := l1.(*netlink.Macvlan); !ok || mv.Mode != netlink.MACVLAN_MODE_BRIDGE {
		t.Errorf("net1 in pod 1: %#v, want a bridge-mode macvlan", l1)
	}
	routes, err := w.podH[0].RouteList(nil, netlink.FAMILY_V4)
	if err != nil || !slices.ContainsFunc(routes, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == "10.0.0.0/8" }) {
		t.Errorf("pod 0's routes %v (%v): want 10.0.0.0/8", routes, err)
	}
	udpRoundTrip(t, w.pods[0], w.pods[1], "192.0.2.2")
	udpRoundTrip(t, w.pods[1], w.pods[0], "192.0.2.1")
	w.detach(t, pd0, 0, cfg0)
	w.detach(t, pd1, 1, cfg1)
	for _, p := range []string{w.hostPath, w.pods[0], w.pods[1]} {
		if n := moves.Out(p); n != 0 {
			t.Errorf("%d links moved out of %s, want none", n, p)
		}
	}
	if diff := cmp.Diff(w.hostLinksStart, netnstest.LinkNames(t, w.hostH)); diff != "" {
		t.Errorf("host links (-before +after):\n%s", diff)
	}
}

// TestSubif_Refused: what the node cannot give is refused with nothing
// changed: an MTU above the parent's (at Setup, naming config.mtu), a
// field the kind does not take, a pod name held by another link (and that
// link left alone), a parent gone at Attach; a pod gone at Detach is
// success. No moves.
func TestSubif_Refused(t *testing.T) {
	w := newSubifWorld(t, &provisionerv1.SubifParent{Name: "mv", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN, Count: 1},
		&provisionerv1.SubifParent{Name: "ipv", ParentIfName: "eth2", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN, Count: 1})
	ctx := ctxFor(t)
	moves := linktest.CountMoves(t, w.hostPath, w.pods[0])
	dev := w.device(t, "mv-0")
	for _, tc := range []struct {
		dev   *devicev1.Device
		cfg   *devicev1.DeviceConfig
		field string
	}{
		{dev, &devicev1.DeviceConfig{Mtu: 9001}, "config.mtu"},
		{dev, &devicev1.DeviceConfig{MinTxRate: new(uint32(1))}, "config.minTxRate"},
		{w.device(t, "ipv-0"), &devicev1.DeviceConfig{MacAddress: "02:00:00:00:00:09"}, "config.macAddress"},
	} {
		_, err := w.srv.Setup(ctx, setupOf(tc.dev, tc.cfg))
		var fe *fielderr.Error
		if status.Code(err) != codes.InvalidArgument || !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("Setup(%v) = %v, want InvalidArgument naming %s", tc.cfg, err, tc.field)
		}
	}

	cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
	setup, err := w.srv.Setup(ctx, setupOf(dev, cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	nodetest.IP(t, "-n", pathName(w.pods[0]), "link", "add", "net1", "type", "veth", "peer", "name", "other")
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.pods[0], Config: cfg})
	if status.Code(err) != codes.AlreadyExists {
		t.Errorf("Attach over another net1 = %v, want AlreadyExists", err)
	}
	if l, err := w.podH[0].LinkByName("net1"); err != nil || l.Type() != "veth" {
		t.Errorf("the pod's own net1 after a refused Attach: %v %v", l, err)
	}
	nodetest.IP(t, "-n", pathName(w.pods[0]), "link", "del", "net1")

	nodetest.IP(t, "-n", pathName(w.hostPath), "link", "set", "eth1", "name", "eth9")
	_, err = w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.pods[0], Config: cfg})
	if status.Code(err) != codes.FailedPrecondition {
		t.Errorf("Attach with the parent gone = %v, want FailedPrecondition", err)
	}
	if names := netnstest.LinkNames(t, w.podH[0]); slices.Contains(names, "net1") {
		t.Errorf("net1 in the pod after a failed Attach: %v", names)
	}
	nodetest.IP(t, "-n", pathName(w.hostPath), "link", "set", "eth9", "name", "eth1")
	if _, err := w.srv.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.pods[0], Config: cfg}); err != nil {
		t.Fatal(err)
	}
	nodetest.IP(t, "netns", "del", pathName(w.pods[0]))
	if _, err := w.srv.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.pods[0], Config: cfg}); err != nil {
		t.Errorf("Detach after the pod's netns went = %v, want nil", err)
	}
	if n := moves.Out(w.hostPath); n != 0 {
		t.Errorf("%d links moved out of the host, want none", n)
	}
	if diff := cmp.Diff(w.hostLinksStart, netnstest.LinkNames(t, w.hostH)); diff != "" {
		t.Errorf("host links (-before +after):\n%s", diff)
	}
}

// pathName is the netns name of /var/run/netns/<name>.
func pathName(path string) string { return path[len("/var/run/netns/"):] }
