package v1alpha1_test

import (
	"errors"
	"testing"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/fielderr"
)

func TestValidateClusterConfig_AddressPools(t *testing.T) {
	good := func() *v1alpha1.ClusterConfigSpec {
		return &v1alpha1.ClusterConfigSpec{
			Spec: v1alpha1.NodeConfigSpec{IPPools: []v1alpha1.IPPool{{Name: "local", Subnet: "192.168.0.0/24"}}},
			AddressPools: []v1alpha1.AddressPool{
				{Name: "v4", Subnet: "10.0.0.0/16", BlockPrefixLength: 24, Gateway: "10.0.0.1"},
				{Name: "v6", Subnet: "fd00::/48", BlockPrefixLength: 112},
			},
		}
	}
	for _, tc := range []struct {
		name      string
		mut       func(*v1alpha1.ClusterConfigSpec)
		wantField string
	}{
		{name: "valid"},
		{name: "bad subnet", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].Subnet = "10.0.0.1/16" }, wantField: "addressPools[0].subnet"},
		{name: "block not longer than the subnet", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].BlockPrefixLength = 16 }, wantField: "addressPools[0].blockPrefixLength"},
		{name: "block longer than an address", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].BlockPrefixLength = 33 }, wantField: "addressPools[0].blockPrefixLength"},
		{name: "gateway outside", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].Gateway = "10.1.0.1" }, wantField: "addressPools[0].gateway"},
		{name: "bad route", mut: func(s *v1alpha1.ClusterConfigSpec) {
			s.AddressPools[1].Routes = []v1alpha1.IPPoolRoute{{Destination: "10.0.0.0/8"}}
		}, wantField: "addressPools[1].routes[0].destination"},
		{name: "duplicate name", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[1].Name = "v4" }, wantField: "addressPools[1].name"},
		{name: "name of a node-local pool", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].Name = "local" }, wantField: "addressPools[0].name"},
		{name: "overlapping subnets", mut: func(s *v1alpha1.ClusterConfigSpec) {
			s.AddressPools[1] = v1alpha1.AddressPool{Name: "b", Subnet: "10.0.128.0/17", BlockPrefixLength: 24}
		}, wantField: "addressPools[1].subnet"},
		{name: "overlapping a node-local range", mut: func(s *v1alpha1.ClusterConfigSpec) {
			s.AddressPools[0].Subnet, s.AddressPools[0].Gateway = "192.168.0.0/16", ""
		}, wantField: "addressPools[0].subnet"},
		{name: "maxBlocksPerNode", mut: func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].MaxBlocksPerNode = 17 }, wantField: "addressPools[0].maxBlocksPerNode"},
		{name: "spec.spec is checked too", mut: func(s *v1alpha1.ClusterConfigSpec) { s.Spec.IPPools[0].Subnet = "x" }, wantField: "spec.ipPools[0].subnet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := good()
			if tc.mut != nil {
				tc.mut(spec)
			}
			err := v1alpha1.ValidateClusterConfig(spec)
			var fe *fielderr.Error
			switch {
			case tc.wantField == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantField != "" && (!errors.As(err, &fe) || fe.Field != tc.wantField):
				t.Fatalf("error %v, want one naming %s", err, tc.wantField)
			}
		})
	}
}
