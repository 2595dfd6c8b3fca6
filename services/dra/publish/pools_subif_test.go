package publish

import (
	"log/slog"
	"testing"

	"github.com/google/go-cmp/cmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestAssign_Subif: sub-interfaces are selected by manager, by parent
// (parentIfNames, as a VF by its PF) and by kind (drivers).
func TestAssign_Subif(t *testing.T) {
	sub := func(name, parent, kind string, k devicev1.SubInterfaceKind) *devicev1.Device {
		return &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, KernelIfName: name, Driver: kind,
			SubInterface: &devicev1.SubInterface{Kind: k, ParentIfName: parent}}
	}
	devs := []*devicev1.Device{vf0, dummy0,
		sub("mv-0", "eth1", "macvlan", devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN),
		sub("ipv-0", "eth2", "ipvlan", devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN),
		sub("v7-0", "ens1f0", "vlan", devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN)}
	for _, tt := range []struct {
		name  string
		specs []Spec
		want  []string
	}{
		{"by manager", []Spec{{Name: "subs", Filter: Filter{DeviceManagers: []string{"subif"}}}}, []string{"subs: ipv-0,mv-0,v7-0"}},
		{"by parent: sub-interfaces and the VFs of a PF", []Spec{{Name: "p", Filter: Filter{ParentIfNames: []string{"eth1", "ens1f0"}}}},
			[]string{"p: 0000-03-00-1,mv-0,v7-0"}},
		{"by kind", []Spec{{Name: "k", Filter: Filter{DeviceManagers: []string{"subif"}, Drivers: []string{"ipvlan", "vlan"}}}}, []string{"k: ipv-0,v7-0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := render(Assign(slog.New(slog.DiscardHandler), tt.specs, devs, nil))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("pools (-want +got):\n%s", diff)
			}
		})
	}
}
