package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
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
			}},
			want: &provisionerv1.ConfigureRequest{SysfsRoot: "/host/sys", Managers: &provisionerv1.ManagerConfigs{
				Sriov: &provisionerv1.SriovConfig{Enabled: true, SysBusPciDevPath: "/host/sys/bus/pci/devices", Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens1f0", VfCount: 4}}},
				Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2},
				Host:  &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"veth"}},
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
