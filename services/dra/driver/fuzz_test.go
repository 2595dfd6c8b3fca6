package driver

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// FuzzDecodeStatusData feeds decodeStatusData any claim status data. A
// rejection is ErrBadStatusData (recovery then rolls the prepare back), the
// same every time; accepted data has a prepared device that is a JSON
// object, for the provisioner's Restore. What dra writes it reads back:
// data made by encodeStatusData from a prepared device and a config
// decodes to the same two.
func FuzzDecodeStatusData(f *testing.F) {
	pd := &devicev1.PreparedDevice{
		Device:       &devicev1.Device{Name: "0000-03-00-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, KernelIfName: "ens1f0v0", PfName: "ens1f0", VfIndex: new(int32(0))},
		OriginalLink: &devicev1.LinkSnapshot{Name: "ens1f0v0", MacAddress: "02:00:00:00:00:01", Mtu: 1500, Up: true},
		OriginalVf:   &devicev1.VfSnapshot{SpoofChk: true, LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO},
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(100)), Addresses: []string{"10.0.0.2/24"},
		Routes: []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "10.0.0.1"}}}
	good, err := encodeStatusData(pd, cfg)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(good), `{}`, `null`, `{"preparedDevice":null}`, `{"preparedDevice":{},"config":null}`,
		`{"preparedDevice":{"device":{"name":"d"}},"config":{"vlanProto":999}}`, `{"preparedDevice":1}`,
		`{"preparedDevice":{},"extra":1}`, `{"preparedDevice":{}} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, cfg, err := decodeStatusData(data)
		_, _, again := decodeStatusData(data)
		if err != nil {
			if !errors.Is(err, ErrBadStatusData) {
				t.Fatalf("decodeStatusData(%q) = %v, want ErrBadStatusData", data, err)
			}
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("decodeStatusData(%q) is not deterministic: %v, then %v", data, err, again)
			}
			return
		}
		if again != nil {
			t.Fatalf("decodeStatusData(%q) is not deterministic: accepted, then %v", data, again)
		}
		if cfg == nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			t.Fatalf("decodeStatusData(%q) = %s, %v: want a prepared device object and a config", data, raw, cfg)
		}
		pd := &devicev1.PreparedDevice{}
		if protojson.Unmarshal(raw, pd) != nil {
			return // Restore refuses it
		}
		checkStatusDataRoundTrip(t, pd, cfg)
	})
}

func checkStatusDataRoundTrip(t *testing.T, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) {
	t.Helper()
	data, err := encodeStatusData(pd, cfg)
	if err != nil {
		return // too long for a claim status entry: never written
	}
	if !json.Valid(data) {
		t.Fatalf("encodeStatusData(%v, %v) = %q, not JSON", pd, cfg, data)
	}
	raw, gotCfg, err := decodeStatusData(data)
	if err != nil {
		t.Fatalf("dra cannot read back what it wrote: %q: %v", data, err)
	}
	got := &devicev1.PreparedDevice{}
	if err := protojson.Unmarshal(raw, got); err != nil {
		t.Fatalf("the prepared device it wrote, %s, does not parse: %v", raw, err)
	}
	if !proto.Equal(got, pd) || !proto.Equal(gotCfg, cfg) {
		t.Fatalf("status data round trip: %v, %v; then %v, %v", pd, cfg, got, gotCfg)
	}
}

// FuzzMergeParams merges a class's and a claim's opaque parameters (any
// bytes): a rejection is a *fielderr.Error, which configFor names under
// the request; a merge is a JSON object with every key of both, each with
// the claim's value when it has one, else the class's.
func FuzzMergeParams(f *testing.F) {
	f.Add([]byte(`{"vlan":5,"mtu":1400}`), []byte(`{"vlan":null,"podIfName":"net1"}`))
	f.Add([]byte(``), []byte(`null`))
	f.Add([]byte(`{"a":1,"a":2}`), []byte(`{}`))
	f.Add([]byte(`[1]`), []byte(`{}`))
	f.Add([]byte(`{} {}`), []byte(`{}`))
	f.Fuzz(func(t *testing.T, class, claim []byte) {
		merged, err := mergeParams([][]byte{class, claim})
		if err != nil {
			var fe *fielderr.Error
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("mergeParams(%q, %q) = %v, want a *fielderr.Error", class, claim, err)
			}
			return
		}
		var got map[string]json.RawMessage
		if err := json.Unmarshal(merged, &got); err != nil || got == nil {
			t.Fatalf("mergeParams(%q, %q) = %q, not a JSON object: %v", class, claim, merged, err)
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
			t.Fatalf("mergeParams(%q, %q) = %s, want the keys of %v", class, claim, merged, want)
		}
		for k, v := range want {
			if !jsonEqual(t, got[k], v) {
				t.Fatalf("mergeParams(%q, %q): %q is %s, want %s", class, claim, k, got[k], v)
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
