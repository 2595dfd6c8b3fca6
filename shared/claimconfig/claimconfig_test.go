package claimconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func u32(v uint32) *uint32 { return &v }
func yes() *bool           { b := true; return &b }

func TestParse(t *testing.T) {
	tests := []struct {
		name      string
		raw       string
		want      *devicev1.DeviceConfig
		wantField string
	}{
		{name: "empty", raw: ``, want: &devicev1.DeviceConfig{}},
		{name: "null", raw: `null`, want: &devicev1.DeviceConfig{}},
		{name: "everything", raw: `{"podIfName":"net1","vlan":100,"vlanQoS":3,"vlanProto":"802.1ad","mac":"02:AA:00:00:00:01",
			"spoofChk":true,"trust":true,"linkState":"enable","minTxRate":10,"maxTxRate":100,"mtu":9000,
			"addresses":["10.0.0.2/24","fd00::2/64"],"routes":[{"destination":"10.1.0.0/16","gateway":"10.0.0.1"},{"destination":"::/0"}],
			"ipPools":["v4","v6"]}`,
			want: &devicev1.DeviceConfig{PodIfName: "net1", Vlan: u32(100), VlanQos: u32(3), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD,
				MacAddress: "02:aa:00:00:00:01", SpoofChk: yes(), Trust: yes(), LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE,
				MinTxRate: u32(10), MaxTxRate: u32(100), Mtu: 9000, Addresses: []string{"10.0.0.2/24", "fd00::2/64"},
				Routes: []*devicev1.Route{{Destination: "10.1.0.0/16", Gateway: "10.0.0.1"}, {Destination: "::/0"}}, IpPools: []string{"v4", "v6"}}},
		{name: "vlan 0 clears", raw: `{"vlan":0}`, want: &devicev1.DeviceConfig{Vlan: u32(0)}},
		{name: "unknown field", raw: `{"podIfName":"net1","vlanId":5}`, wantField: "vlanId"},
		{name: "case matters", raw: `{"VLAN":5}`, wantField: "VLAN"},
		{name: "key twice", raw: `{"vlan":5,"vlan":6}`, wantField: "vlan"},
		{name: "wrong type", raw: `{"vlan":"100"}`, wantField: "vlan"},
		{name: "negative", raw: `{"mtu":-1}`, wantField: "mtu"},
		{name: "not JSON", raw: `{"vlan":`, wantField: "parameters"},
		{name: "trailing data", raw: `{} {}`, wantField: "parameters"},
		{name: "not an object", raw: `[{"vlan":5}]`, wantField: "parameters"},
		{name: "empty key", raw: `{"":5}`, wantField: "parameters"},
		{name: "unknown route key", raw: `{"routes":[{"destination":"::/0"},{"dst":"::/0"}]}`, wantField: "routes[1].dst"},
		{name: "empty route key", raw: `{"routes":[{"":""}]}`, wantField: "routes[0]"},
		{name: "route key case matters", raw: `{"routes":[{"Destination":"::/0"}]}`, wantField: "routes[0].Destination"},
		{name: "route key twice", raw: `{"routes":[{"destination":"::/0","destination":"10.0.0.0/8"}]}`, wantField: "routes[0].destination"},
		{name: "podIfName too long", raw: `{"podIfName":"abcdefghijklmnop"}`, wantField: "podIfName"},
		{name: "podIfName lo", raw: `{"podIfName":"lo"}`, wantField: "podIfName"},
		{name: "podIfName with slash", raw: `{"podIfName":"a/b"}`, wantField: "podIfName"},
		{name: "vlan 4095", raw: `{"vlan":4095}`, wantField: "vlan"},
		{name: "qos without vlan", raw: `{"vlanQoS":3}`, wantField: "vlanQoS"},
		{name: "qos 8", raw: `{"vlan":5,"vlanQoS":8}`, wantField: "vlanQoS"},
		{name: "proto without vlan", raw: `{"vlanProto":"802.1q"}`, wantField: "vlanProto"},
		{name: "bad proto", raw: `{"vlan":5,"vlanProto":"qinq"}`, wantField: "vlanProto"},
		{name: "multicast mac", raw: `{"mac":"01:00:5e:00:00:01"}`, wantField: "mac"},
		{name: "zero mac", raw: `{"mac":"00:00:00:00:00:00"}`, wantField: "mac"},
		{name: "bad link state", raw: `{"linkState":"up"}`, wantField: "linkState"},
		{name: "min above max", raw: `{"minTxRate":100,"maxTxRate":10}`, wantField: "minTxRate"},
		{name: "mtu too small", raw: `{"mtu":67}`, wantField: "mtu"},
		{name: "address without prefix", raw: `{"addresses":["10.0.0.1/24","10.0.0.2"]}`, wantField: "addresses[1]"},
		{name: "route with host bits", raw: `{"routes":[{"destination":"10.1.0.1/16"}]}`, wantField: "routes[0].destination"},
		{name: "route gateway family", raw: `{"routes":[{"destination":"10.1.0.0/16","gateway":"fd00::1"}]}`, wantField: "routes[0].gateway"},
		{name: "broadcast address", raw: `{"addresses":["255.255.255.255/32"]}`, wantField: "addresses[0]"},
		{name: "route to IPv4-mapped", raw: `{"routes":[{"destination":"::ffff:0.0.0.0/96"}]}`, wantField: "routes[0].destination"},
		{name: "route gateway unspecified", raw: `{"routes":[{"destination":"10.0.0.0/8","gateway":"0.0.0.0"}]}`, wantField: "routes[0].gateway"},
		{name: "route gateway multicast", raw: `{"routes":[{"destination":"ff00::/8","gateway":"ff02::1"}]}`, wantField: "routes[0].gateway"},
		{name: "route gateway with a zone", raw: `{"routes":[{"destination":"::/0","gateway":"fe80::1%eth0"}]}`, wantField: "routes[0].gateway"},
		{name: "three pools", raw: `{"ipPools":["a","b","c"]}`, wantField: "ipPools"},
		{name: "bad pool", raw: `{"ipPools":["A/B"]}`, wantField: "ipPools[0]"},
		{name: "vfio with VF settings", raw: `{"vfio":true,"vlan":10,"mac":"02:00:00:00:00:01"}`,
			want: &devicev1.DeviceConfig{Vfio: yes(), Vlan: u32(10), MacAddress: "02:00:00:00:00:01"}},
		{name: "not vfio", raw: `{"vfio":false,"podIfName":"net1"}`, want: &devicev1.DeviceConfig{Vfio: new(false), PodIfName: "net1"}},
		{name: "vfio with podIfName", raw: `{"vfio":true,"podIfName":"net1"}`, wantField: "podIfName"},
		{name: "vfio with addresses", raw: `{"vfio":true,"addresses":["10.0.0.2/24"]}`, wantField: "addresses"},
		{name: "vfio not a bool", raw: `{"vfio":"yes"}`, wantField: "vfio"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse([]byte(tt.raw))
			if tt.wantField != "" {
				fe, ok := err.(*fielderr.Error)
				if !ok || fe.Field != tt.wantField {
					t.Fatalf("Parse() error = %v, want a field error for %s", err, tt.wantField)
				}
				if !strings.Contains(err.Error(), tt.wantField+": ") {
					t.Errorf("message %q does not name %s", err, tt.wantField)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
