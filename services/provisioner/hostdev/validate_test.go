package hostdev

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func hostDev(ifName string) *devicev1.Device {
	return &devicev1.Device{Name: deviceName(ifName), Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: ifName}
}

func newTestManager(t *testing.T, opts ...Option) *Manager {
	t.Helper()
	m, err := New(testLogger(t), t.TempDir(), &provisionerv1.HostConfig{IfNames: []string{"eth*"}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestValidate(t *testing.T) {
	u32 := proto.Uint32
	yes := proto.Bool(true)
	dev := hostDev("eth1")
	for _, tc := range []struct {
		name      string
		dev       *devicev1.Device
		cfg       *devicev1.DeviceConfig
		wantField string // "" for valid
	}{
		{"nil config", dev, nil, ""},
		{"empty config", dev, &devicev1.DeviceConfig{}, ""},
		{"common settings", dev, &devicev1.DeviceConfig{
			PodIfName: "net1", MacAddress: "02:00:00:00:00:01", Mtu: 9000,
			Addresses: []string{"192.0.2.1/24"}, Routes: []*devicev1.Route{{Destination: "10.0.0.0/8"}},
		}, ""},
		{"trust", dev, &devicev1.DeviceConfig{Trust: proto.Bool(false)}, "config.trust"},
		{"linkState", dev, &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_DISABLE}, "config.linkState"},
		{"minTxRate", dev, &devicev1.DeviceConfig{MinTxRate: u32(10)}, "config.minTxRate"},
		{"maxTxRate", dev, &devicev1.DeviceConfig{MaxTxRate: u32(100)}, "config.maxTxRate"},
		// The VLAN settings and the spoof check are enforced in software (eBPF).
		{"software vlan", dev, &devicev1.DeviceConfig{Vlan: u32(100), VlanQos: u32(3), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q}, ""},
		{"vlan zero is no vlan", dev, &devicev1.DeviceConfig{Vlan: u32(0)}, ""},
		{"spoofChk", dev, &devicev1.DeviceConfig{SpoofChk: yes}, ""},
		{"spoofChk false", dev, &devicev1.DeviceConfig{SpoofChk: proto.Bool(false)}, ""},
		{"vlan above 4094", dev, &devicev1.DeviceConfig{Vlan: u32(4095)}, "config.vlan"},
		{"vlanQoS above 7", dev, &devicev1.DeviceConfig{Vlan: u32(1), VlanQos: u32(8)}, "config.vlanQoS"},
		{"vlanQoS without vlan", dev, &devicev1.DeviceConfig{VlanQos: u32(3)}, "config.vlanQoS"},
		{"vlanProto without vlan", dev, &devicev1.DeviceConfig{VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q}, "config.vlanProto"},
		{"first hardware-only field wins", dev, &devicev1.DeviceConfig{Trust: yes, MaxTxRate: u32(1), Vlan: u32(5)}, "config.trust"},
		{"other manager", &devicev1.Device{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "eth1"}, nil, "device.manager"},
		{"no interface", &devicev1.Device{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST}, nil, "device.kernelIfName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := newTestManager(t).Validate(tc.dev, tc.cfg)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) {
				t.Fatalf("Validate() = %v, want a *fielderr.Error for %s", err, tc.wantField)
			}
			if diff := cmp.Diff(tc.wantField, fe.Field); diff != "" {
				t.Errorf("field (-want +got):\n%s", diff)
			}
			t.Log(err)
		})
	}
}

func TestValidate_Message(t *testing.T) {
	err := newTestManager(t).Validate(hostDev("eth1"), &devicev1.DeviceConfig{Trust: proto.Bool(true)})
	want := "config.trust: not supported by the host manager (not an SR-IOV VF); only sr-iov devices take it"
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
}

func TestFree(t *testing.T) {
	m := newTestManager(t)
	pd := &devicev1.PreparedDevice{Device: hostDev("eth1"), OriginalLink: &devicev1.LinkSnapshot{Name: "eth1"}}
	for i := range 2 {
		if err := m.Free(t.Context(), pd); err != nil {
			t.Fatalf("Free() #%d = %v, want nil", i+1, err)
		}
	}
}
