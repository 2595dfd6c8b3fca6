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
		{name: "versioned", raw: `{"apiVersion":"netdra.io/v1alpha1","kind":"NetworkConfig","mtu":1400}`, want: &devicev1.DeviceConfig{Mtu: 1400}},
		{name: "network", raw: `{"podIfName":"net1","vrf":{"name":"red","table":10},
			"routes":[{"destination":"0.0.0.0/0","gateway":"10.0.0.1","table":100,"scope":"universe","source":"10.0.0.2","metric":5,"onlink":true}],
			"rules":[{"priority":100,"from":"10.0.0.0/24","table":100,"oif":"net1","fwmark":1}],
			"neighbors":[{"address":"fd00::1","mac":"02:AA:00:00:00:01"}],"sysctls":{"ipv4.rp_filter":2},
			"txqueuelen":5000,"gsoMaxSize":196608,"features":{"rx-gro":false},"privateFlags":{"legacy-rx":true},"ebpfPrograms":false}`,
			want: &devicev1.DeviceConfig{PodIfName: "net1", Vrf: &devicev1.Vrf{Name: "red", Table: 10},
				Routes: []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "10.0.0.1", Table: 100, Scope: devicev1.RouteScope_ROUTE_SCOPE_UNIVERSE,
					Source: "10.0.0.2", Metric: 5, Onlink: true}},
				Rules:     []*devicev1.Rule{{Priority: 100, From: "10.0.0.0/24", Table: 100, Oif: "net1", Fwmark: u32(1)}},
				Neighbors: []*devicev1.Neighbor{{Address: "fd00::1", Mac: "02:aa:00:00:00:01"}},
				LinkSettings: &devicev1.LinkSettings{Txqueuelen: u32(5000), GsoMaxSize: u32(196608), Sysctls: map[string]int32{"ipv4.rp_filter": 2},
					Features: map[string]bool{"rx-gro": false}, PrivateFlags: map[string]bool{"legacy-rx": true}},
				EbpfDisabled: true}},
		{name: "unknown apiVersion", raw: `{"apiVersion":"netdra.io/v2","kind":"NetworkConfig"}`, wantField: "apiVersion"},
		{name: "unknown kind", raw: `{"apiVersion":"netdra.io/v1alpha1","kind":"NodeConfig"}`, wantField: "kind"},
		{name: "kind alone", raw: `{"kind":"NetworkConfig"}`, wantField: "apiVersion"},
		{name: "apiVersion alone", raw: `{"apiVersion":"netdra.io/v1alpha1"}`, wantField: "kind"},
		{name: "route table local", raw: `{"routes":[{"destination":"::/0","table":255}]}`, wantField: "routes[0].table"},
		{name: "route scope", raw: `{"routes":[{"destination":"::/0","scope":"global"}]}`, wantField: "routes[0].scope"},
		{name: "route source family", raw: `{"routes":[{"destination":"::/0","source":"10.0.0.1"}]}`, wantField: "routes[0].source"},
		{name: "onlink without gateway", raw: `{"routes":[{"destination":"::/0","onlink":true}]}`, wantField: "routes[0].onlink"},
		{name: "unknown rule key", raw: `{"rules":[{"table":5,"prio":1}]}`, wantField: "rules[0].prio"},
		{name: "rule without table", raw: `{"rules":[{"from":"10.0.0.0/8"}]}`, wantField: "rules[0].table"},
		{name: "rule families", raw: `{"rules":[{"from":"10.0.0.0/8","to":"fd00::/8","table":5}]}`, wantField: "rules[0].to"},
		{name: "rule host bits", raw: `{"rules":[{"from":"10.0.0.1/8","table":5}]}`, wantField: "rules[0].from"},
		{name: "rule fwmask alone", raw: `{"rules":[{"fwmask":1,"table":5}]}`, wantField: "rules[0].fwmask"},
		{name: "neighbor mac", raw: `{"neighbors":[{"address":"10.0.0.1","mac":"x"}]}`, wantField: "neighbors[0].mac"},
		{name: "neighbor address", raw: `{"neighbors":[{"address":"10.0.0.0/24","mac":"02:00:00:00:00:01"}]}`, wantField: "neighbors[0].address"},
		{name: "vrf without table", raw: `{"vrf":{"name":"red"}}`, wantField: "vrf.table"},
		{name: "vrf unknown key", raw: `{"vrf":{"name":"red","table":5,"Table":6}}`, wantField: "vrf.Table"},
		{name: "sysctl not allowed", raw: `{"sysctls":{"ipv4.mc_forwarding":1}}`, wantField: "sysctls"},
		{name: "sysctl out of range", raw: `{"sysctls":{"ipv4.rp_filter":3}}`, wantField: "sysctls"},
		{name: "sysctl twice", raw: `{"sysctls":{"ipv4.rp_filter":1,"ipv4.rp_filter":2}}`, wantField: "sysctls"},
		{name: "key after a map", raw: `{"sysctls":{},"VLAN":1}`, wantField: "VLAN"},
		{name: "gso too big", raw: `{"gsoMaxSize":600000}`, wantField: "gsoMaxSize"},
		{name: "feature name", raw: `{"features":{"rx gro":true}}`, wantField: "features"},
		{name: "dhcp", raw: `{"podIfName":"net1","dhcp":true,"mtu":1400,"routes":[{"destination":"10.9.0.0/16","gateway":"10.0.0.1"}]}`,
			want: &devicev1.DeviceConfig{PodIfName: "net1", Dhcp: true, Mtu: 1400, Routes: []*devicev1.Route{{Destination: "10.9.0.0/16", Gateway: "10.0.0.1"}}}},
		{name: "dhcp and addresses", raw: `{"dhcp":true,"addresses":["10.0.0.2/24"]}`, wantField: "dhcp"},
		{name: "dhcp and pools", raw: `{"dhcp":true,"ipPools":["v4"]}`, wantField: "dhcp"},
		{name: "dhcp not a bool", raw: `{"dhcp":"yes"}`, wantField: "dhcp"},
		{name: "vfio and dhcp", raw: `{"vfio":true,"dhcp":true}`, wantField: "dhcp"},
		{name: "vfio and vrf", raw: `{"vfio":true,"vrf":{"name":"red","table":5}}`, wantField: "vrf"},
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
