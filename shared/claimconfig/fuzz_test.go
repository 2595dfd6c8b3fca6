package claimconfig

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// FuzzParse feeds Parse any bytes. A rejection is a *fielderr.Error naming
// a field, the same every time; an accepted config round-trips: written
// back as parameters (paramsOf) and parsed again, it is the same config.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		``, `null`, `{}`, `{"vlan":0}`, `{"VLAN":5}`, `{"vlan":5,"vlan":6}`, `{} {}`, `[1]`, `"x"`,
		`{"podIfName":"net1","vlan":100,"vlanQoS":3,"vlanProto":"802.1AD","mac":"02:AA:00:00:00:01",
			"spoofChk":true,"trust":false,"linkState":"enable","minTxRate":10,"maxTxRate":100,"mtu":9000,
			"addresses":["10.0.0.2/24","fd00::2/64"],"routes":[{"destination":"10.1.0.0/16","gateway":"10.0.0.1"},{"destination":"::/0"}],
			"ipPools":["v4","v6"]}`,
		`{"vfio":true,"vlan":10,"mac":"02:00:00:00:00:01"}`, `{"vfio":true,"podIfName":"net1"}`, `{"vfio":false}`,
		`{"routes":[{"destination":"10.1.0.0/16","gateway":"fe80::1%eth0"}]}`,
		`{"addresses":["255.255.255.255/32"]}`,
		`{"minTxRate":5,"maxTxRate":0}`,
		`{"apiVersion":"netdra.io/v1alpha1","kind":"NetworkConfig","podIfName":"net1","vrf":{"name":"red","table":10},
			"routes":[{"destination":"0.0.0.0/0","gateway":"10.0.0.1","table":100,"scope":"universe","source":"10.0.0.2","metric":5,"onlink":true}],
			"rules":[{"priority":100,"from":"10.0.0.0/24","table":100,"iif":"net1","fwmark":1,"fwmask":255}],
			"neighbors":[{"address":"10.0.0.1","mac":"02:00:00:00:00:01"}],"sysctls":{"ipv4.rp_filter":2,"ipv6.accept_ra":0},
			"txqueuelen":5000,"gsoMaxSize":196608,"groMaxSize":196608,"gsoIPv4MaxSize":196608,"groIPv4MaxSize":196608,
			"features":{"rx-gro":false},"privateFlags":{"legacy-rx":true},"ebpfPrograms":false}`,
		`{"sysctls":{"ipv4.rp_filter":1,"ipv4.rp_filter":2}}`, `{"apiVersion":"v2"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		cfg, err := Parse(raw)
		_, again := Parse(raw)
		if err != nil {
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field == "" || fe.Reason == "" {
				t.Fatalf("Parse(%q) = %v (%T), want a *fielderr.Error naming a field", raw, err, err)
			}
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("Parse(%q) is not deterministic: %v, then %v", raw, err, again)
			}
			return
		}
		if again != nil {
			t.Fatalf("Parse(%q) is not deterministic: accepted, then %v", raw, again)
		}
		back, err := json.Marshal(paramsOf(cfg))
		if err != nil {
			t.Fatal(err)
		}
		got, err := Parse(back)
		if err != nil {
			t.Fatalf("Parse(%q) accepted %v, but not its own parameters %s: %v", raw, cfg, back, err)
		}
		if !proto.Equal(cfg, got) {
			t.Fatalf("round trip of %q through %s: %v, then %v", raw, back, cfg, got)
		}
	})
}

// paramsOf is the inverse of Params.Config: the parameters that give cfg.
func paramsOf(cfg *devicev1.DeviceConfig) *Params {
	p := &Params{
		PodIfName: cfg.GetPodIfName(), Vlan: cfg.Vlan, VlanQoS: cfg.VlanQos, MAC: cfg.GetMacAddress(),
		SpoofChk: cfg.SpoofChk, Trust: cfg.Trust, MinTxRate: cfg.MinTxRate, MaxTxRate: cfg.MaxTxRate,
		MTU: cfg.GetMtu(), Addresses: cfg.GetAddresses(), IPPools: cfg.GetIpPools(), Vfio: cfg.Vfio,
	}
	for name, v := range vlanProtos {
		if v == cfg.GetVlanProto() {
			p.VlanProto = name
		}
	}
	for name, v := range linkStates {
		if v == cfg.GetLinkState() {
			p.LinkState = name
		}
	}
	for _, r := range cfg.GetRoutes() {
		route := Route{Destination: r.GetDestination(), Gateway: r.GetGateway(), Table: r.GetTable(), Source: r.GetSource(),
			Metric: r.GetMetric(), OnLink: r.GetOnlink()}
		for name, v := range routeScopes {
			if v == r.GetScope() {
				route.Scope = name
			}
		}
		p.Routes = append(p.Routes, route)
	}
	for _, r := range cfg.GetRules() {
		p.Rules = append(p.Rules, Rule{Priority: r.GetPriority(), From: r.GetFrom(), To: r.GetTo(), Table: r.GetTable(),
			IIf: r.GetIif(), OIf: r.GetOif(), FwMark: r.Fwmark, FwMask: r.Fwmask})
	}
	for _, n := range cfg.GetNeighbors() {
		p.Neighbors = append(p.Neighbors, Neighbor{Address: n.GetAddress(), MAC: n.GetMac()})
	}
	if v := cfg.GetVrf(); v != nil {
		p.VRF = &VRF{Name: v.GetName(), Table: v.GetTable()}
	}
	if s := cfg.GetLinkSettings(); s != nil {
		p.TxQueueLen, p.GSOMaxSize, p.GROMaxSize, p.GSOIPv4MaxSize, p.GROIPv4MaxSize = s.Txqueuelen, s.GsoMaxSize, s.GroMaxSize, s.GsoIpv4MaxSize, s.GroIpv4MaxSize
		p.Features, p.PrivateFlags, p.Sysctls = s.GetFeatures(), s.GetPrivateFlags(), s.GetSysctls()
	}
	if cfg.GetEbpfDisabled() {
		no := false
		p.EbpfPrograms = &no
	}
	return p
}

// FuzzMergeParams merges a class's and a claim's opaque parameters (any
// bytes): a rejection is a *fielderr.Error, which dra's configFor names under
// the request; a merge is a JSON object with every key of both, each with
// the claim's value when it has one, else the class's.
func FuzzMergeParams(f *testing.F) {
	f.Add([]byte(`{"vlan":5,"mtu":1400}`), []byte(`{"vlan":null,"podIfName":"net1"}`))
	f.Add([]byte(``), []byte(`null`))
	f.Add([]byte(`{"a":1,"a":2}`), []byte(`{}`))
	f.Add([]byte(`[1]`), []byte(`{}`))
	f.Add([]byte(`{} {}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, class, claim []byte) {
		merged, err := MergeParams([][]byte{class, claim})
		if err != nil {
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("MergeParams(%q, %q) = %v, want a *fielderr.Error", class, claim, err)
			}
			return
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(merged, &got); err != nil || got == nil {
			t.Fatalf("MergeParams(%q, %q) = %q, not a JSON object: %v", class, claim, merged, err)
		}
		want := map[string]json.RawMessage{}
		for _, raw := range [][]byte{class, claim} {
			var m map[string]json.RawMessage
			if len(bytes.TrimSpace(raw)) > 0 {
				_ = json.Unmarshal(raw, &m)
			}
			for k, v := range m {
				want[k] = v
			}
		}
		if len(got) != len(want) {
			t.Fatalf("MergeParams(%q, %q) = %s, want the keys of %v", class, claim, merged, want)
		}
		for k, v := range want {
			if !jsonEqual(t, got[k], v) {
				t.Fatalf("MergeParams(%q, %q): %q is %s, want %s", class, claim, k, got[k], v)
			}
		}
	})
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return false
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}
