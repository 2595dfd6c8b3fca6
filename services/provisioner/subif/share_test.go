package subif

import (
	"testing"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

func sharedConfig() *provisionerv1.SubifConfig {
	c := testConfig()
	c.Parents = append(c.Parents, &provisionerv1.SubifParent{Name: "mvs", ParentIfName: "eth4", Kind: macvlan,
		Bandwidth: 10_000_000_000, DefaultBandwidth: 100_000_000})
	return c
}

func TestNew_Shared(t *testing.T) {
	last := func(c *provisionerv1.SubifConfig) *provisionerv1.SubifParent { return c.Parents[len(c.Parents)-1] }
	for _, tc := range []struct {
		name   string
		modify func(*provisionerv1.SubifParent)
		field  string
	}{
		{"valid", func(*provisionerv1.SubifParent) {}, ""},
		{"whole by default", func(p *provisionerv1.SubifParent) { p.DefaultBandwidth = 0 }, ""},
		{"ipvlan", func(p *provisionerv1.SubifParent) { p.Kind = ipvlan }, ""},
		{"with a count", func(p *provisionerv1.SubifParent) { p.Count = 2 }, "parents[6].count"},
		{"vlan", func(p *provisionerv1.SubifParent) { p.Kind = vlan }, "parents[6].bandwidth"},
		{"passthru", func(p *provisionerv1.SubifParent) {
			p.Mode = devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU
		}, "parents[6].bandwidth"},
		{"too small", func(p *provisionerv1.SubifParent) { p.Bandwidth, p.DefaultBandwidth = 999_999, 0 }, "parents[6].bandwidth"},
		{"too large", func(p *provisionerv1.SubifParent) { p.Bandwidth = MaxBandwidth + 1 }, "parents[6].bandwidth"},
		{"default above", func(p *provisionerv1.SubifParent) { p.DefaultBandwidth = p.Bandwidth + 1 }, "parents[6].defaultBandwidth"},
		{"default alone", func(p *provisionerv1.SubifParent) { p.Bandwidth = 0 }, "parents[6].defaultBandwidth"},
		{"a counted name", func(p *provisionerv1.SubifParent) { p.Name = "mv-7" }, "parents[6].name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := sharedConfig()
			tc.modify(last(c))
			_, err := New(nil, c)
			wantField(t, err, tc.field)
		})
	}
}

// A shared parent is one device named as its entry, with its capacity;
// Validate takes it with a share in range only, and a counted device with
// none.
func TestValidate_Share(t *testing.T) {
	m, err := New(nil, sharedConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := m.byName["mvs"]
	dev := o.device(0, 1500, devicev1.LinkState_LINK_STATE_UP)
	if dev.GetName() != "mvs" || dev.GetBandwidthCapacity() != 10_000_000_000 || dev.GetBandwidthDefault() != 100_000_000 || o.devices() != 1 {
		t.Fatalf("shared device %v (%d devices), want mvs with 10G, default 100M, alone", dev, o.devices())
	}
	if _, ok := m.offerOf("mvs-0"); ok {
		t.Error("mvs-0 is a device of the shared entry")
	}
	share := func(id string, bw uint64) *devicev1.Device {
		d := proto.CloneOf(dev)
		d.Share = &devicev1.Share{Id: id, Bandwidth: bw}
		return d
	}
	counted := m.byName["mv"].device(0, 1500, devicev1.LinkState_LINK_STATE_UP)
	counted.Share = &devicev1.Share{Id: "x", Bandwidth: 1}
	forged := proto.CloneOf(dev)
	forged.BandwidthCapacity = 100_000_000_000
	for _, tc := range []struct {
		name  string
		dev   *devicev1.Device
		field string
	}{
		{"a share", share("5f1c-aa", 50_000_000), ""},
		{"the whole", share("5f1c-aa", 10_000_000_000), ""},
		{"no share", dev, "share.id"},
		{"no ID", share("", 50_000_000), "share.id"},
		{"no bandwidth", share("5f1c-aa", 0), "share.bandwidth"},
		{"above the capacity", share("5f1c-aa", 10_000_000_001), "share.bandwidth"},
		{"a share of a counted device", counted, "share"},
		{"another capacity", forged, "device.bandwidthCapacity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, m.Validate(tc.dev, &devicev1.DeviceConfig{}), tc.field)
		})
	}
}
