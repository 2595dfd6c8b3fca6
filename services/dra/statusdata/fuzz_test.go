package statusdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// FuzzDecodeStatusData feeds Decode any claim status data. A
// rejection is ErrBad (recovery then rolls the prepare back), the
// same every time; accepted data has a prepared device that is a JSON
// object, for the provisioner's Restore. What dra writes it reads back:
// data made by Encode from a prepared device and a config
// decodes to the same two.
func FuzzDecodeStatusData(f *testing.F) {
	pd := &devicev1.PreparedDevice{
		Device:       &devicev1.Device{Name: "0000-03-00-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, KernelIfName: "ens1f0v0", PfName: "ens1f0", VfIndex: new(int32(0))},
		OriginalLink: &devicev1.LinkSnapshot{Name: "ens1f0v0", MacAddress: "02:00:00:00:00:01", Mtu: 1500, Up: true},
		OriginalVf:   &devicev1.VfSnapshot{SpoofChk: true, LinkState: devicev1.VfLinkState_VF_LINK_STATE_AUTO},
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(100)), Addresses: []string{"10.0.0.2/24"},
		Routes: []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "10.0.0.1"}}}
	good, err := Encode(pd, cfg)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{string(good), `{}`, `null`, `{"preparedDevice":null}`, `{"preparedDevice":{},"config":null}`,
		`{"preparedDevice":{"device":{"name":"d"}},"config":{"vlanProto":999}}`, `{"preparedDevice":1}`,
		`{"preparedDevice":{},"extra":1}`, `{"preparedDevice":{}} {}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		raw, cfg, err := Decode(data)
		_, _, again := Decode(data)
		if err != nil {
			if !errors.Is(err, ErrBad) {
				t.Fatalf("Decode(%q) = %v, want ErrBad", data, err)
			}
			if again == nil || again.Error() != err.Error() {
				t.Fatalf("Decode(%q) is not deterministic: %v, then %v", data, err, again)
			}
			return
		}
		if again != nil {
			t.Fatalf("Decode(%q) is not deterministic: accepted, then %v", data, again)
		}
		if cfg == nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			t.Fatalf("Decode(%q) = %s, %v: want a prepared device object and a config", data, raw, cfg)
		}
		pd := &devicev1.PreparedDevice{}
		if protojson.Unmarshal(raw, pd) != nil {
			return // Restore refuses it
		}
		checkRoundTrip(t, pd, cfg)
	})
}

func checkRoundTrip(t *testing.T, pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) {
	t.Helper()
	data, err := Encode(pd, cfg)
	if err != nil {
		return // too long for a claim status entry: never written
	}
	if !json.Valid(data) {
		t.Fatalf("Encode(%v, %v) = %q, not JSON", pd, cfg, data)
	}
	raw, gotCfg, err := Decode(data)
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
