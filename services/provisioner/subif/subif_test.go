package subif

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

const (
	macvlan = devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN
	ipvlan  = devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN
	vlan    = devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN
)

func testConfig() *provisionerv1.SubifConfig {
	return &provisionerv1.SubifConfig{Enabled: true, Parents: []*provisionerv1.SubifParent{
		{Name: "mv", ParentIfName: "eth1", Kind: macvlan, Count: 3},
		{Name: "pt", ParentIfName: "eth2", Kind: macvlan, Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU, Count: 1},
		{Name: "ipv", ParentIfName: "eth3", Kind: ipvlan, Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3, Count: 2},
		{Name: "v100", ParentIfName: "eth1", Kind: vlan, Count: 2, VlanId: 100},
		{Name: "vany", ParentIfName: "eth1", Kind: vlan, Count: 1},
		{Name: "a-rather-long-entry-name", ParentIfName: "eth1", Kind: macvlan, Count: 1},
	}}
}

func wantField(t *testing.T, err error, field string) {
	t.Helper()
	if field == "" {
		if err != nil {
			t.Fatalf("got %v, want nil", err)
		}
		return
	}
	var fe *fielderr.Error
	if !errors.As(err, &fe) || fe.Field != field {
		t.Fatalf("got %v, want a *fielderr.Error for %s", err, field)
	}
	t.Log(err)
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name   string
		modify func(*provisionerv1.SubifConfig)
		field  string
	}{
		{"valid", func(*provisionerv1.SubifConfig) {}, ""},
		{"nil", func(c *provisionerv1.SubifConfig) { *c = provisionerv1.SubifConfig{} }, ""},
		{"no name", func(c *provisionerv1.SubifConfig) { c.Parents[1].Name = "" }, "parents[1].name"},
		{"bad name", func(c *provisionerv1.SubifConfig) { c.Parents[1].Name = "Eth_1" }, "parents[1].name"},
		{"long name", func(c *provisionerv1.SubifConfig) { c.Parents[1].Name = strings.Repeat("a", 59) }, "parents[1].name"},
		{"duplicate name", func(c *provisionerv1.SubifConfig) { c.Parents[2].Name = "mv" }, "parents[2].name"},
		{"no parent", func(c *provisionerv1.SubifConfig) { c.Parents[0].ParentIfName = "" }, "parents[0].parentIfName"},
		{"bad parent", func(c *provisionerv1.SubifConfig) { c.Parents[0].ParentIfName = "eth 1" }, "parents[0].parentIfName"},
		{"no kind", func(c *provisionerv1.SubifConfig) { c.Parents[0].Kind = 0 }, "parents[0].kind"},
		{"unknown kind", func(c *provisionerv1.SubifConfig) { c.Parents[0].Kind = 99 }, "parents[0].kind"},
		{"ipvlan mode on a macvlan", func(c *provisionerv1.SubifConfig) {
			c.Parents[0].Mode = devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L2
		}, "parents[0].mode"},
		{"mode on a vlan", func(c *provisionerv1.SubifConfig) {
			c.Parents[3].Mode = devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE
		}, "parents[3].mode"},
		{"count", func(c *provisionerv1.SubifConfig) { c.Parents[0].Count = MaxCount + 1 }, "parents[0].count"},
		{"passthru count", func(c *provisionerv1.SubifConfig) { c.Parents[1].Count = 2 }, "parents[1].count"},
		{"vlanId on an ipvlan", func(c *provisionerv1.SubifConfig) { c.Parents[2].VlanId = 5 }, "parents[2].vlanId"},
		{"vlanId range", func(c *provisionerv1.SubifConfig) { c.Parents[3].VlanId = 4095 }, "parents[3].vlanId"},
		{"macvlan and ipvlan on one parent", func(c *provisionerv1.SubifConfig) { c.Parents[2].ParentIfName = "eth1" }, "parents[2].kind"},
		{"ipvlan modes on one parent", func(c *provisionerv1.SubifConfig) {
			c.Parents = append(c.Parents, &provisionerv1.SubifParent{Name: "ipv2", ParentIfName: "eth3", Kind: ipvlan, Count: 1})
		}, "parents[6].mode"},
		{"passthru beside another macvlan", func(c *provisionerv1.SubifConfig) { c.Parents[1].ParentIfName = "eth1" }, "parents[1].mode"},
		{"vlan beside macvlans and ipvlans", func(c *provisionerv1.SubifConfig) { c.Parents[3].ParentIfName = "eth3" }, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			tc.modify(cfg)
			_, err := New(nil, cfg)
			wantField(t, err, tc.field)
		})
	}
}

func TestDevices(t *testing.T) {
	m, err := New(nil, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	o := m.byName["mv"]
	d := o.device(2, 1500, devicev1.LinkState_LINK_STATE_UP)
	want := &devicev1.Device{Name: "mv-2", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, KernelIfName: "mv-2", Driver: "macvlan",
		Mtu: 1500, LinkState: devicev1.LinkState_LINK_STATE_UP,
		SubInterface: &devicev1.SubInterface{Kind: macvlan, Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, ParentIfName: "eth1"}}
	if !proto.Equal(d, want) {
		t.Errorf("device = %v, want %v (the default mode resolved)", d, want)
	}
	long := m.byName["a-rather-long-entry-name"].device(0, 1500, 0)
	if k := long.GetKernelIfName(); len(k) > 15 || !strings.HasPrefix(k, "sub") {
		t.Errorf("kernel name of %s = %q, want a short sub... name", long.GetName(), k)
	}
	if _, ok := m.offerOf(long.GetName()); !ok {
		t.Errorf("offerOf(%s) = false", long.GetName())
	}
	for _, name := range []string{"mv-3", "mv-01", "mv-", "mv", "mv--1", "nope-0", "ipv-1x"} {
		if _, ok := m.offerOf(name); ok {
			t.Errorf("offerOf(%q) = true, want false", name)
		}
	}
}

func TestValidate(t *testing.T) {
	u32 := proto.Uint32
	m, err := New(nil, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	dev := func(entry string, i int) *devicev1.Device { return m.byName[entry].device(i, 1500, 0) }
	otherMode := dev("mv", 0)
	otherMode.SubInterface.Mode = devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_VEPA
	for _, tc := range []struct {
		name  string
		dev   *devicev1.Device
		cfg   *devicev1.DeviceConfig
		field string
	}{
		{"macvlan, every common field", dev("mv", 1), &devicev1.DeviceConfig{PodIfName: "net1", MacAddress: "02:00:00:00:00:01", Mtu: 1400,
			Addresses: []string{"192.0.2.1/24"}, IpPools: []string{"v4"}}, ""},
		{"macvlan, software vlan and spoof check", dev("mv", 1), &devicev1.DeviceConfig{Vlan: u32(7), SpoofChk: proto.Bool(true)}, ""},
		{"trust", dev("mv", 0), &devicev1.DeviceConfig{Trust: proto.Bool(true)}, "config.trust"},
		{"maxTxRate", dev("ipv", 0), &devicev1.DeviceConfig{MaxTxRate: u32(100)}, "config.maxTxRate"},
		{"passthru MAC", dev("pt", 0), &devicev1.DeviceConfig{MacAddress: "02:00:00:00:00:01"}, "config.macAddress"},
		{"ipvlan MAC", dev("ipv", 1), &devicev1.DeviceConfig{MacAddress: "02:00:00:00:00:01"}, "config.macAddress"},
		{"ipvlan spoofChk", dev("ipv", 1), &devicev1.DeviceConfig{SpoofChk: proto.Bool(false)}, "config.spoofChk"},
		{"ipvlan vlan", dev("ipv", 1), &devicev1.DeviceConfig{Vlan: u32(3)}, "config.vlan"},
		{"ipvlan common", dev("ipv", 1), &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 1400}, ""},
		{"vlan from the entry", dev("v100", 1), nil, ""},
		{"vlan, the same in the claim", dev("v100", 1), &devicev1.DeviceConfig{Vlan: u32(100), VlanQos: u32(5), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD}, ""},
		{"vlan, another in the claim", dev("v100", 1), &devicev1.DeviceConfig{Vlan: u32(101)}, "config.vlan"},
		{"vlan from the claim", dev("vany", 0), &devicev1.DeviceConfig{Vlan: u32(42), MacAddress: "02:00:00:00:00:01"}, ""},
		{"vlan from nowhere", dev("vany", 0), &devicev1.DeviceConfig{}, "config.vlan"},
		{"vlan out of range", dev("vany", 0), &devicev1.DeviceConfig{Vlan: u32(4095)}, "config.vlan"},
		{"other manager", &devicev1.Device{Name: "mv-0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}, nil, "device.manager"},
		{"unknown device", &devicev1.Device{Name: "mv-9", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF}, nil, "device.name"},
		{"kernel name", &devicev1.Device{Name: "mv-0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, KernelIfName: "eth0"}, nil, "device.kernelIfName"},
		{"sub-interface differs", otherMode, nil, "device.subInterface"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantField(t, m.Validate(tc.dev, tc.cfg), tc.field)
		})
	}
}

// TestSetup_Invalid needs no kernel: Setup validates before it looks at
// the node.
func TestSetup_Invalid(t *testing.T) {
	m, err := New(nil, testConfig())
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Setup(t.Context(), m.byName["ipv"].device(0, 1500, 0), &devicev1.DeviceConfig{MacAddress: "02:00:00:00:00:01"}, "")
	wantField(t, err, "config.macAddress")
}
