//go:build kernelrig

package server

// Sub-interfaces the host kernel cannot make (it has neither 802.1q nor
// ipvlan), inside the kernel rig, through the service's API: VLAN links
// (the ID from the entry or the claim, 802.1ad, the claim's priority; two
// of one parent) and ipvlan links (l2, l3, l3s; one mode a parent, as the
// kernel has it), created in the pod, deleted there at Detach,
// the parent never moved: 0 moves in, 0 out, counted from the kernel's own
// link notifications.

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/link/linktest"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/services/provisioner/subif"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// rigSubif is a provisioner with the subif manager whose host is a
// throwaway netns holding the parents eth1, eth2, eth3 (veths, MTU 9000,
// up, their peers up), and two pods.
type rigSubif struct {
	srv       *Server
	host      string
	pods      [2]string
	hostH     *netlink.Handle
	podH      [2]*netlink.Handle
	parent    netlink.Link // eth1
	parents   map[string]netlink.Link
	hostLinks []string
	moves     *linktest.Moves
	ctx       context.Context
}

func newRigSubif(t *testing.T, parents ...*provisionerv1.SubifParent) *rigSubif {
	t.Helper()
	kernelrig.Require(t)
	w := &rigSubif{host: netnstest.New(t), pods: [2]string{netnstest.New(t), netnstest.New(t)}}
	w.hostH = netnstest.Handle(t, w.host)
	w.podH = [2]*netlink.Handle{netnstest.Handle(t, w.pods[0]), netnstest.Handle(t, w.pods[1])}
	w.parents = map[string]netlink.Link{}
	for _, name := range []string{"eth1", "eth2", "eth3"} {
		netnstest.AddVeth(t, w.hostH, netnstest.Veth{Name: name, Peer: name + "p", MTU: 9000})
		l, err := w.hostH.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		w.parents[name] = l
	}
	w.parent = w.parents["eth1"]
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mover, err := link.NewMover(log, link.WithHostNetns(w.host))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mover.Close() })
	w.srv = New(log, Factories{Subif: func(c *provisionerv1.SubifConfig) (manager.Manager, error) {
		return subif.New(log, c, subif.WithNetns(w.host))
	}}, mover)
	t.Cleanup(w.srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	w.ctx = ctx
	if _, err := w.srv.Configure(ctx, subifConfig(parents...)); err != nil {
		t.Fatal(err)
	}
	w.hostLinks = netnstest.LinkNames(t, w.hostH)
	w.moves = linktest.CountMoves(t, w.host, w.pods[0], w.pods[1])
	return w
}

func (w *rigSubif) device(t *testing.T, name string) *devicev1.Device {
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

// up sets dev up for pod i with cfg and attaches it twice (idempotent).
func (w *rigSubif) up(t *testing.T, dev string, i int, cfg *devicev1.DeviceConfig) *devicev1.PreparedDevice {
	t.Helper()
	setup, err := w.srv.Setup(w.ctx, setupOf(w.device(t, dev), cfg))
	if err != nil {
		t.Fatal(err)
	}
	pd := setup.GetPreparedDevice()
	for range 2 {
		if _, err := w.srv.Attach(w.ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: w.pods[i], Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	return pd
}

// down detaches (twice) and frees pd from pod i.
func (w *rigSubif) down(t *testing.T, pd *devicev1.PreparedDevice, i int, cfg *devicev1.DeviceConfig) {
	t.Helper()
	for range 2 {
		if _, err := w.srv.Detach(w.ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: w.pods[i], Config: cfg}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.srv.Free(w.ctx, &provisionerv1.FreeRequest{PreparedDevice: pd, Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if l, err := w.podH[i].LinkByName(cfg.GetPodIfName()); err == nil {
		t.Errorf("%s still in pod %d after Detach: %v", cfg.GetPodIfName(), i, l.Attrs())
	}
}

// done checks that nothing moved and the host's links are as they were.
func (w *rigSubif) done(t *testing.T) {
	t.Helper()
	for _, p := range []string{w.host, w.pods[0], w.pods[1]} {
		if n := w.moves.Out(p); n != 0 {
			t.Errorf("%d links moved out of %s, want none", n, p)
		}
	}
	if diff := cmp.Diff(w.hostLinks, netnstest.LinkNames(t, w.hostH)); diff != "" {
		t.Errorf("host links (-before +after):\n%s", diff)
	}
}

func TestKernel_SubifVLAN(t *testing.T) {
	w := newRigSubif(t,
		&provisionerv1.SubifParent{Name: "v100", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN, Count: 1, VlanId: 100},
		&provisionerv1.SubifParent{Name: "vany", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN, Count: 1})
	mac := w.parent.Attrs().HardwareAddr.String()
	cfg0 := &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 1500, Addresses: []string{"192.0.2.1/24"}}
	cfg1 := &devicev1.DeviceConfig{PodIfName: "net2", Vlan: new(uint32(42)), VlanQos: new(uint32(5)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD,
		MacAddress: "02:00:00:00:42:01", Addresses: []string{"198.51.100.1/24"}}
	pd0 := w.up(t, "v100-0", 0, cfg0)
	pd1 := w.up(t, "vany-0", 1, cfg1)
	if got := pd1.GetDevice().GetSubInterface().GetVlanId(); got != 42 {
		t.Errorf("prepared VLAN ID %d, want the claim's 42", got)
	}
	v0, ok := checkSubLink(t, w.podH[0], "net1", "vlan", w.parent.Attrs().Index, 1500, mac).(*netlink.Vlan)
	if !ok || v0.VlanId != 100 || v0.VlanProtocol != netlink.VLAN_PROTOCOL_8021Q {
		t.Errorf("net1 in pod 0: %+v, want 802.1Q VLAN 100", v0)
	}
	v1, ok := checkSubLink(t, w.podH[1], "net2", "vlan", w.parent.Attrs().Index, 9000, "02:00:00:00:42:01").(*netlink.Vlan)
	if !ok || v1.VlanId != 42 || v1.VlanProtocol != netlink.VLAN_PROTOCOL_8021AD || v1.EgressQosMap[0] != 5 {
		t.Errorf("net2 in pod 1: %+v, want 802.1ad VLAN 42, priority 5 on egress", v1)
	}
	w.down(t, pd0, 0, cfg0)
	w.down(t, pd1, 1, cfg1)
	w.done(t)
}

func TestKernel_SubifIpvlan(t *testing.T) {
	ipvlan := devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN
	w := newRigSubif(t,
		&provisionerv1.SubifParent{Name: "ipl2", ParentIfName: "eth1", Kind: ipvlan, Count: 2},
		&provisionerv1.SubifParent{Name: "ipl3", ParentIfName: "eth2", Kind: ipvlan, Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3, Count: 1},
		&provisionerv1.SubifParent{Name: "ipl3s", ParentIfName: "eth3", Kind: ipvlan, Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S, Count: 1})
	mac, parent := w.parent.Attrs().HardwareAddr.String(), w.parent.Attrs().Index
	cfgs := []*devicev1.DeviceConfig{
		{PodIfName: "net1", Mtu: 1500, Addresses: []string{"198.51.100.1/24"}},
		{PodIfName: "net1", Addresses: []string{"198.51.100.2/24"}},
		{PodIfName: "net3", Addresses: []string{"203.0.113.1/24"}},
		{PodIfName: "net4", Addresses: []string{"203.0.113.2/24"}},
	}
	pds := []*devicev1.PreparedDevice{w.up(t, "ipl2-0", 0, cfgs[0]), w.up(t, "ipl2-1", 1, cfgs[1]), w.up(t, "ipl3-0", 0, cfgs[2]), w.up(t, "ipl3s-0", 1, cfgs[3])}
	if got := pds[0].GetOriginalLink().GetMacAddress(); got != mac {
		t.Errorf("prepared ipvlan MAC %s, want the parent's %s", got, mac)
	}
	checkSubLink(t, w.podH[0], "net1", "ipvlan", parent, 1500, mac)
	checkSubLink(t, w.podH[1], "net1", "ipvlan", parent, 9000, mac)
	for _, c := range []struct {
		pod        int
		name       string
		parent     string
		mode       netlink.IPVlanMode
		modeString string
	}{{0, "net3", "eth2", netlink.IPVLAN_MODE_L3, "l3"}, {1, "net4", "eth3", netlink.IPVLAN_MODE_L3S, "l3s"}} {
		p := w.parents[c.parent].Attrs()
		l, ok := checkSubLink(t, w.podH[c.pod], c.name, "ipvlan", p.Index, 9000, p.HardwareAddr.String()).(*netlink.IPVlan)
		if !ok || l.Mode != c.mode {
			t.Errorf("%s: %s, want an %s ipvlan", c.name, fmt.Sprint(l), c.modeString)
		}
	}
	udpRoundTrip(t, w.pods[0], w.pods[1], "198.51.100.2")
	for i, pd := range pds {
		w.down(t, pd, []int{0, 1, 0, 1}[i], cfgs[i])
	}
	w.done(t)
}
