package nodeconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

func TestProvisioner(t *testing.T) {
	tests := []struct {
		name string
		spec v1alpha1.NodeConfigSpec
		want *provisionerv1.ConfigureRequest
	}{
		{name: "nothing configured", want: &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{}}},
		{
			name: "sysfs root and every manager",
			spec: v1alpha1.NodeConfigSpec{SysfsRoot: "/host/sys", DeviceManagerConfigs: &v1alpha1.DeviceManagerConfigs{
				SRIOV: &v1alpha1.SRIOVConfig{Enabled: true, SysBusPCIDevPath: "/host/sys/bus/pci/devices", Ifaces: []v1alpha1.SRIOVIface{{IfName: "ens1f0", VFCount: 4}}},
				Dummy: &v1alpha1.DummyConfig{Enabled: true, Count: 2},
				Host:  &v1alpha1.HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"veth"}},
				Subif: &v1alpha1.SubifConfig{Enabled: true, Parents: []v1alpha1.SubifParent{
					{Name: "mv", ParentIfName: "eth1", Kind: v1alpha1.SubifMacvlan, Count: 4},
					{Name: "ipv", ParentIfName: "eth1", Kind: v1alpha1.SubifIPvlan, Mode: "l3s", Count: 2, AllowDefaultRoute: true},
					{Name: "v100", ParentIfName: "eth2", Kind: v1alpha1.SubifVLAN, Count: 1, VLANID: 100},
				}},
			}},
			want: &provisionerv1.ConfigureRequest{SysfsRoot: "/host/sys", Managers: &provisionerv1.ManagerConfigs{
				Sriov: &provisionerv1.SriovConfig{Enabled: true, SysBusPciDevPath: "/host/sys/bus/pci/devices", Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens1f0", VfCount: 4}}},
				Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2},
				Host:  &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"veth"}},
				Subif: &provisionerv1.SubifConfig{Enabled: true, Parents: []*provisionerv1.SubifParent{
					{Name: "mv", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN, Count: 4},
					{Name: "ipv", ParentIfName: "eth1", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN,
						Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S, Count: 2, AllowDefaultRoute: true},
					{Name: "v100", ParentIfName: "eth2", Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN, Count: 1, VlanId: 100},
				}},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, Provisioner(&tt.spec), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestPools: each pool's filter, unhealthy-taint effect and Multus resource
// name reach the pool rules.
func TestPools(t *testing.T) {
	spec := &v1alpha1.NodeConfigSpec{Pools: []v1alpha1.Pool{
		{Name: "vfs", UnhealthyTaintEffect: v1alpha1.TaintEffectNone, MultusResourceName: "intel.com/sriov_vf",
			Filter: &v1alpha1.PoolFilter{DeviceManagers: []v1alpha1.DeviceManager{v1alpha1.DeviceManagerSRIOV}, PFNames: []string{"ens1f0"}}},
		{Name: "rest"},
	}}
	want := []publish.Spec{
		{Name: "vfs", TaintEffect: "None", MultusResourceName: "intel.com/sriov_vf",
			Filter: publish.Filter{DeviceManagers: []string{"sr-iov"}, PFNames: []string{"ens1f0"}}},
		{Name: "rest"},
	}
	if diff := cmp.Diff(want, Pools(spec)); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
