package dummy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func dummyDev(name string) *devicev1.Device {
	return &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: name, Driver: "dummy"}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name      string
		cfg       *provisionerv1.DummyConfig
		wantField string // "" for valid
	}{
		{"nil config", nil, ""},
		{"zero", &provisionerv1.DummyConfig{Enabled: true}, ""},
		{"three", &provisionerv1.DummyConfig{Enabled: true, Count: 3}, ""},
		{"max", &provisionerv1.DummyConfig{Enabled: true, Count: MaxCount}, ""},
		{"above max", &provisionerv1.DummyConfig{Enabled: true, Count: MaxCount + 1}, "count"},
		{"huge", &provisionerv1.DummyConfig{Enabled: true, Count: 1 << 31}, "count"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(testLogger(t), tc.cfg)
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("New() = %v, want nil", err)
				}
				return
			}
			var fe *fielderr.Error
			if !errors.As(err, &fe) {
				t.Fatalf("New() = %v, want a *fielderr.Error for %s", err, tc.wantField)
			}
			if diff := cmp.Diff(tc.wantField, fe.Field); diff != "" {
				t.Errorf("field (-want +got):\n%s", diff)
			}
			t.Log(err)
		})
	}
}

func TestRun(t *testing.T) {
	for _, tc := range []struct {
		name  string
		count uint32
		want  []*devicev1.Device
	}{
		{"none", 0, []*devicev1.Device{}},
		{"one", 1, []*devicev1.Device{dummyDev("dummy0")}},
		{"three", 3, []*devicev1.Device{dummyDev("dummy0"), dummyDev("dummy1"), dummyDev("dummy2")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(testLogger(t), &provisionerv1.DummyConfig{Enabled: true, Count: tc.count})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(t.Context())
			published := make(chan []*devicev1.Device, 10)
			done := make(chan error, 1)
			go func() { done <- m.Run(ctx, func(d []*devicev1.Device) { published <- d }) }()
			got := <-published
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("published (-want +got):\n%s", diff)
			}
			select {
			case err := <-done:
				t.Fatalf("Run returned %v before ctx ended", err)
			default:
			}
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run() = %v after cancel, want nil", err)
			}
			if len(published) != 0 {
				t.Errorf("published %d more times, want once", len(published))
			}
		})
	}
}

func TestRun_Large(t *testing.T) {
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Count: MaxCount})
	if err != nil {
		t.Fatal(err)
	}
	devs := m.Devices()
	if len(devs) != MaxCount {
		t.Fatalf("%d devices, want %d", len(devs), MaxCount)
	}
	seen := map[string]bool{}
	for _, d := range devs {
		if seen[d.GetName()] {
			t.Errorf("duplicate device %s", d.GetName())
		}
		seen[d.GetName()] = true
	}
	if last := devs[MaxCount-1].GetName(); last != "dummy1023" {
		t.Errorf("last device %s, want dummy1023", last)
	}
}

func TestValidate(t *testing.T) {
	u32 := proto.Uint32
	yes := proto.Bool(true)
	dev := dummyDev("dummy1")
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
		{"trust", dev, &devicev1.DeviceConfig{Trust: yes}, "config.trust"},
		{"linkState", dev, &devicev1.DeviceConfig{LinkState: devicev1.VfLinkState_VF_LINK_STATE_ENABLE}, "config.linkState"},
		{"minTxRate", dev, &devicev1.DeviceConfig{MinTxRate: u32(10)}, "config.minTxRate"},
		{"maxTxRate", dev, &devicev1.DeviceConfig{MaxTxRate: u32(0)}, "config.maxTxRate"},
		// The VLAN settings and the spoof check are enforced in software (eBPF).
		{"software vlan", dev, &devicev1.DeviceConfig{Vlan: u32(100), VlanQos: u32(3), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD}, ""},
		{"vlan zero is no vlan", dev, &devicev1.DeviceConfig{Vlan: u32(0)}, ""},
		{"spoofChk", dev, &devicev1.DeviceConfig{SpoofChk: yes}, ""},
		{"spoofChk false", dev, &devicev1.DeviceConfig{SpoofChk: proto.Bool(false)}, ""},
		{"vlan above 4094", dev, &devicev1.DeviceConfig{Vlan: u32(4095)}, "config.vlan"},
		{"vlanQoS above 7", dev, &devicev1.DeviceConfig{Vlan: u32(1), VlanQos: u32(8)}, "config.vlanQoS"},
		{"vlanQoS without vlan", dev, &devicev1.DeviceConfig{VlanQos: u32(3)}, "config.vlanQoS"},
		{"vlanProto without vlan", dev, &devicev1.DeviceConfig{VlanProto: devicev1.VlanProto_VLAN_PROTO_8021AD}, "config.vlanProto"},
		{"first hardware-only field wins", dev, &devicev1.DeviceConfig{Trust: yes, MaxTxRate: u32(1), Vlan: u32(5)}, "config.trust"},
		{"other manager", &devicev1.Device{Name: "dummy1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: "dummy1"}, nil, "device.manager"},
		{"index out of range", dummyDev("dummy3"), nil, "device.name"},
		{"not a dummy name", dummyDev("eth0"), nil, "device.name"},
		{"leading zero", dummyDev("dummy01"), nil, "device.name"},
		{"no index", dummyDev("dummy"), nil, "device.name"},
		{"negative index", dummyDev("dummy-1"), nil, "device.name"},
		{"kernel name differs", &devicev1.Device{Name: "dummy1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "eth0"}, nil, "device.kernelIfName"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := New(testLogger(t), &provisionerv1.DummyConfig{Enabled: true, Count: 3})
			if err != nil {
				t.Fatal(err)
			}
			err = m.Validate(tc.dev, tc.cfg)
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
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = m.Validate(dummyDev("dummy0"), &devicev1.DeviceConfig{Trust: proto.Bool(true)})
	want := "config.trust: not supported by the dummy manager (not an SR-IOV VF); only sr-iov devices take it"
	if err == nil || err.Error() != want {
		t.Errorf("Validate() = %v, want %q", err, want)
	}
}

// TestSetup_Invalid needs no kernel: Setup validates before it records
// anything, so a bad config fails the same everywhere.
func TestSetup_Invalid(t *testing.T) {
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.Setup(t.Context(), dummyDev("dummy0"), &devicev1.DeviceConfig{Trust: proto.Bool(true)}, "")
	if !errors.Is(err, fielderr.ErrInvalid) {
		t.Fatalf("Setup() = %v, want a field error", err)
	}
}

// TestFree_TouchesNothing needs no kernel: Setup changed nothing on the
// node, so Free has nothing to undo, again and again.
func TestFree_TouchesNothing(t *testing.T) {
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	pd := &devicev1.PreparedDevice{Device: dummyDev("dummy0"), OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0"}, LinkCreated: true}
	for range 2 {
		if err := m.Free(t.Context(), pd); err != nil {
			t.Fatalf("Free() = %v, want nil", err)
		}
	}
}

// TestSetup_TouchesNothing needs no kernel: Setup only records what the
// link made in the pod at Attach will be.
func TestSetup_TouchesNothing(t *testing.T) {
	m, err := New(testLogger(t), &provisionerv1.DummyConfig{Count: 2})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := m.Setup(t.Context(), dummyDev("dummy1"), &devicev1.DeviceConfig{PodIfName: "net1", Mtu: 9000}, "")
	if err != nil {
		t.Fatalf("Setup() = %v", err)
	}
	mac, err := net.ParseMAC(pd.GetOriginalLink().GetMacAddress())
	if err != nil || len(mac) != 6 {
		t.Fatalf("original MAC %q: %v", pd.GetOriginalLink().GetMacAddress(), err)
	}
	if mac[0]&0x01 != 0 || mac[0]&0x02 == 0 {
		t.Errorf("MAC %s is not a locally administered unicast address", mac)
	}
	want := &devicev1.PreparedDevice{
		Device:       dummyDev("dummy1"),
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy1", MacAddress: mac.String(), Mtu: 1500},
		LinkCreated:  true,
	}
	if diff := cmp.Diff(want, pd, protocmp.Transform()); diff != "" {
		t.Errorf("prepared device (-want +got):\n%s", diff)
	}
	other, err := m.Setup(t.Context(), dummyDev("dummy0"), nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if other.GetOriginalLink().GetMacAddress() == mac.String() {
		t.Errorf("two devices got the same MAC %s", mac)
	}
}
