package sriov

import (
	"errors"
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

func TestManager_Validate(t *testing.T) {
	root := fixtureTree(t)
	const (
		q  = devicev1.VlanProto_VLAN_PROTO_8021Q
		ad = devicev1.VlanProto_VLAN_PROTO_8021AD
	)
	type cfg = devicev1.DeviceConfig
	for _, tc := range []struct {
		name      string
		dev       *devicev1.Device // vf1 when nil
		cfg       *cfg
		wantField string
		wantErr   error
	}{
		{name: "nil config"},
		{name: "every setting", cfg: allSettings()},
		{name: "vlan 0 clears", cfg: &cfg{Vlan: new(uint32(0)), VlanQos: new(uint32(0))}},
		{name: "vlan 4094 with 802.1Q", cfg: &cfg{Vlan: new(uint32(4094)), VlanQos: new(uint32(7)), VlanProto: q}},
		{name: "vlan 4095 is reserved", cfg: &cfg{Vlan: new(uint32(4095))}, wantField: "config.vlan"},
		{name: "vlan above 4095", cfg: &cfg{Vlan: new(uint32(4096))}, wantField: "config.vlan"},
		{name: "vlanQoS above 7", cfg: &cfg{Vlan: new(uint32(10)), VlanQos: new(uint32(8))}, wantField: "config.vlanQoS"},
		{name: "vlanQoS without vlan", cfg: &cfg{VlanQos: new(uint32(0))}, wantField: "config.vlanQoS"},
		{name: "vlanQoS with vlan 0", cfg: &cfg{Vlan: new(uint32(0)), VlanQos: new(uint32(3))}, wantField: "config.vlanQoS"},
		{name: "vlanProto without vlan", cfg: &cfg{VlanProto: ad}, wantField: "config.vlanProto"},
		{name: "vlanProto with vlan 0", cfg: &cfg{Vlan: new(uint32(0)), VlanProto: q}, wantField: "config.vlanProto"},
		{name: "unknown vlanProto", cfg: &cfg{Vlan: new(uint32(5)), VlanProto: 7}, wantField: "config.vlanProto"},
		{name: "not a MAC", cfg: &cfg{MacAddress: "02:aa:bb"}, wantField: "config.macAddress"},
		{name: "multicast MAC", cfg: &cfg{MacAddress: "01:00:5e:00:00:01"}, wantField: "config.macAddress"},
		{name: "zero MAC", cfg: &cfg{MacAddress: "00:00:00:00:00:00"}, wantField: "config.macAddress"},
		{name: "64-bit MAC", cfg: &cfg{MacAddress: "02:00:00:00:00:00:00:01"}, wantField: "config.macAddress"},
		{name: "unknown linkState", cfg: &cfg{LinkState: 9}, wantField: "config.linkState"},
		{name: "min above max", cfg: &cfg{MinTxRate: new(uint32(200)), MaxTxRate: new(uint32(100))}, wantField: "config.minTxRate"},
		{name: "min with max 0 (no limit)", cfg: &cfg{MinTxRate: new(uint32(200)), MaxTxRate: new(uint32(0))}},
		{name: "min equal to max", cfg: &cfg{MinTxRate: new(uint32(100)), MaxTxRate: new(uint32(100))}},
		{name: "mtu up to the PF's", cfg: &cfg{Mtu: 9000}},
		{name: "mtu above the PF's", cfg: &cfg{Mtu: 9001}, wantField: "config.mtu"},
		{name: "mtu with an unreadable PF MTU", dev: withPF(vf1, "ens7"), cfg: &cfg{Mtu: 9001}},
		{name: "vfio VF: settings", dev: vfio, cfg: allSettings()},
		{name: "vfio VF: podIfName", dev: vfio, cfg: &cfg{PodIfName: "dpdk0"}},
		{name: "vfio VF: mtu", dev: vfio, cfg: &cfg{Mtu: 1500}, wantField: "config.mtu"},
		{name: "vfio VF: addresses", dev: vfio, cfg: &cfg{Addresses: []string{"10.0.0.2/24"}}, wantField: "config.addresses"},
		{name: "vfio VF: routes", dev: vfio, cfg: &cfg{Routes: []*devicev1.Route{{Destination: "0.0.0.0/0"}}}, wantField: "config.routes"},
		{name: "vfio VF: ipPools", dev: vfio, cfg: &cfg{IpPools: []string{"pool-a"}}, wantField: "config.ipPools"},
		{name: "not a VF", dev: &devicev1.Device{Name: "eth0", KernelIfName: "eth0"}, cfg: &cfg{}, wantErr: ErrNotVF},
		{name: "VF without an index", dev: &devicev1.Device{Name: "x", PfName: "ens1f0"}, wantErr: ErrNotVF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestManager(t, root, newFake())
			dev := tc.dev
			if dev == nil {
				dev = vf1
			}
			err := m.Validate(dev, tc.cfg)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Validate error %v, want %v", err, tc.wantErr)
				}
				return
			}
			checkField(t, err, tc.wantField)
		})
	}
}
