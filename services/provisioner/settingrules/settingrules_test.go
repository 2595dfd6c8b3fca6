package settingrules

import (
	"errors"
	"testing"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func TestRefuseVF(t *testing.T) {
	u := func(v uint32) *uint32 { return &v }
	b := func(v bool) *bool { return &v }
	tests := []struct {
		name      string
		cfg       *devicev1.DeviceConfig
		wantField string // "" for nil
	}{
		{name: "nil config", cfg: nil},
		{name: "empty config", cfg: &devicev1.DeviceConfig{}},
		{name: "software vlan", cfg: &devicev1.DeviceConfig{Vlan: u(100), VlanQos: u(3), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD}},
		{name: "trust false still set", cfg: &devicev1.DeviceConfig{Trust: b(false)}, wantField: "config.trust"},
		{name: "link state", cfg: &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE}, wantField: "config.linkState"},
		{name: "min rate zero still set", cfg: &devicev1.DeviceConfig{MinTxRate: u(0)}, wantField: "config.minTxRate"},
		{name: "max rate", cfg: &devicev1.DeviceConfig{MaxTxRate: u(10)}, wantField: "config.maxTxRate"},
		{name: "vlan out of range", cfg: &devicev1.DeviceConfig{Vlan: u(4095)}, wantField: "config.vlan"},
		{name: "qos out of range", cfg: &devicev1.DeviceConfig{Vlan: u(1), VlanQos: u(8)}, wantField: "config.vlanQoS"},
		{name: "qos without vlan", cfg: &devicev1.DeviceConfig{VlanQos: u(1)}, wantField: "config.vlanQoS"},
		{name: "proto without vlan", cfg: &devicev1.DeviceConfig{VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q}, wantField: "config.vlanProto"},
		{name: "unknown proto", cfg: &devicev1.DeviceConfig{Vlan: u(1), VlanProto: 99}, wantField: "config.vlanProto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := RefuseVF("dummy", tt.cfg)
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("RefuseVF: %v, want nil", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field != tt.wantField {
				t.Fatalf("RefuseVF: %v, want a *fielderr.Error naming %s", err, tt.wantField)
			}
		})
	}
}
