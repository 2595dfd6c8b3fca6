//go:build kernelrig

package link

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/netnstest"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/testinfra/kernelrig"
)

// TestKernel_VRF attaches two moved links of one pod to one VRF (the
// host kernel has no vrf module): the VRF is made by the first, used by
// the second, their routes go to its table, and it stays in the pod until
// the last of them is detached. A VRF of another table is refused naming
// vrf.table.
func TestKernel_VRF(t *testing.T) {
	kernelrig.Require(t)
	r := newRig(t)
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv0", Peer: "ndp0", MAC: hostMAC, MTU: 1500})
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv1", Peer: "ndp1", MAC: "02:00:00:00:00:02", MTU: 1500})
	vrf := &devicev1.Vrf{Name: "red", Table: 10}
	cfgs := []*devicev1.DeviceConfig{
		{PodIfName: "net1", Vrf: vrf, Addresses: []string{"192.0.2.10/24"}, Routes: []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "192.0.2.1"}}},
		{PodIfName: "net2", Vrf: vrf, Addresses: []string{"198.51.100.10/24"}, Routes: []*devicev1.Route{{Destination: "203.0.113.0/24", Gateway: "198.51.100.1"}}},
	}
	origs := []*devicev1.LinkSnapshot{snapshotOf(t, r.host, "ndv0"), snapshotOf(t, r.host, "ndv1")}
	for i, name := range []string{"ndv0", "ndv1"} {
		if err := r.mover.Attach(t.Context(), name, origs[i], r.podPath, cfgs[i]); err != nil {
			t.Fatalf("Attach %s: %v", name, err)
		}
	}
	red, err := r.pod.LinkByName("red")
	if err != nil {
		t.Fatalf("no VRF red in the pod: %v", err)
	}
	if v, ok := red.(*netlink.Vrf); !ok || v.Table != 10 || red.Attrs().Alias != VRFAlias {
		t.Fatalf("red = %#v, want a VRF of table 10 marked %s", red, VRFAlias)
	}
	for _, name := range []string{"net1", "net2"} {
		l, err := r.pod.LinkByName(name)
		if err != nil || l.Attrs().MasterIndex != red.Attrs().Index {
			t.Errorf("%s is not enslaved to red: %v", name, err)
		}
	}
	routes := retryDump(t, func() ([]netlink.Route, error) {
		return r.pod.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: 10}, netlink.RT_FILTER_TABLE)
	})
	var static int
	for _, rt := range routes {
		if rt.Gw != nil {
			static++
		}
	}
	if static != 2 {
		t.Errorf("table 10 has %d routes via a gateway, want 2: %v", static, routes)
	}

	bad := &devicev1.DeviceConfig{PodIfName: "net3", Vrf: &devicev1.Vrf{Name: "red", Table: 11}}
	netnstest.AddVeth(t, r.host, netnstest.Veth{Name: "ndv2", Peer: "ndp2", MAC: "02:00:00:00:00:03", MTU: 1500})
	if err := r.mover.Attach(t.Context(), "ndv2", snapshotOf(t, r.host, "ndv2"), r.podPath, bad); !isField(err, "vrf.table") {
		t.Errorf("Attach into red with table 11: %v, want a field error for vrf.table", err)
	}
	if viewOf(t, r.host, "ndv2") == nil {
		t.Error("ndv2 is not back in the host after the refused Attach")
	}

	if err := r.mover.Detach(t.Context(), origs[0], r.podPath, cfgs[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := r.pod.LinkByName("red"); err != nil {
		t.Fatalf("red is gone while net2 is enslaved to it: %v", err)
	}
	if err := r.mover.Detach(t.Context(), origs[1], r.podPath, cfgs[1]); err != nil {
		t.Fatal(err)
	}
	if names := netnstest.LinkNames(t, r.pod); len(names) != 1 {
		t.Errorf("the pod has %v after both Detaches, want only lo", names)
	}
	for i, name := range []string{"ndv0", "ndv1"} {
		if got := snapshotOf(t, r.host, name); got.GetName() != origs[i].GetName() || got.GetMacAddress() != origs[i].GetMacAddress() {
			t.Errorf("%s after Detach = %v, want %v", name, got, origs[i])
		}
	}
}

// isField reports whether err is a *fielderr.Error for field.
func isField(err error, field string) bool {
	var fe *fielderr.Error
	return errors.As(err, &fe) && fe.Field == field
}
