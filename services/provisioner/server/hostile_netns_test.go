//go:build !kernelrig

// This test needs root and iproute2 (a throwaway netns); the kernel rig
// does not run it.

package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/hostiletest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// recordingManager is a real manager whose Run and Validate are its own
// and whose Setup and Free are recorded instead of done: the test checks
// the provisioner's validation, not the host.
type recordingManager struct {
	manager.Manager
	log *callLog
}

func (m recordingManager) Setup(_ context.Context, dev *devicev1.Device, _ *devicev1.DeviceConfig, _ string) (*devicev1.PreparedDevice, error) {
	m.log.add("setup " + dev.GetName())
	return &devicev1.PreparedDevice{Device: dev, OriginalLink: &devicev1.LinkSnapshot{Name: dev.GetKernelIfName()}}, nil
}

func (m recordingManager) Free(_ context.Context, pd *devicev1.PreparedDevice) error {
	m.log.add("free " + pd.GetDevice().GetName())
	return nil
}

// recordingPrograms stands in for the eBPF programs: every device has
// counters, every call is recorded.
type recordingPrograms struct{ log *callLog }

var (
	_ Programs      = recordingPrograms{}
	_ CounterReader = recordingPrograms{}
)

func (p recordingPrograms) Attach(_ context.Context, device, netnsPath, ifName string, _ ebpf.Policy) error {
	p.log.add("programs attach " + device + " " + netnsPath + " " + ifName)
	return nil
}
func (p recordingPrograms) Detach(device string) error {
	p.log.add("programs detach " + device)
	return nil
}
func (p recordingPrograms) Remove(device string) error {
	p.log.add("programs remove " + device)
	return nil
}
func (p recordingPrograms) Counters(string) (ebpf.Counters, error) {
	return ebpf.Counters{RxPackets: 1}, nil
}
func (p recordingPrograms) Devices() ([]string, error) { return []string{"dummy0"}, nil }

// hostileWorld is a provisioner with the real managers: the dummy and host
// managers in a throwaway netns standing in for the host's, the sr-iov and
// host managers reading a fake sysfs, Setup and Free recorded, and a
// recording mover and programs.
type hostileWorld struct {
	hostPath, sysfs string
	log             *callLog
	srv             *Server
	conn            *grpc.ClientConn
}

func (w *hostileWorld) factories(log *slog.Logger) Factories {
	root := func(r string) string {
		if r == "" {
			return w.sysfs
		}
		return r
	}
	return Factories{
		Sriov: func(sysfsRoot string, c *provisionerv1.SriovConfig, prepared PreparedVFs, report func([]string)) (manager.Manager, error) {
			m, err := sriov.New(log, root(sysfsRoot), c, sriov.WithResync(time.Hour), sriov.WithPrepared(prepared), sriov.WithReport(report))
			if err != nil {
				return nil, err
			}
			return recordingManager{m, w.log}, nil
		},
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) {
			m, err := dummy.New(log, c)
			if err != nil {
				return nil, err
			}
			return recordingManager{m, w.log}, nil
		},
		Host: func(sysfsRoot string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			m, err := hostdev.New(log, root(sysfsRoot), c, hostdev.WithNetns(w.hostPath), hostdev.WithResync(time.Hour))
			if err != nil {
				return nil, err
			}
			return recordingManager{m, w.log}, nil
		},
	}
}

// start serves a new provisioner configured with cfg, and waits until the
// dummy manager published dummy0.
func (w *hostileWorld) start(t *testing.T, cfg *provisionerv1.ConfigureRequest) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	w.log = &callLog{}
	w.srv = New(log, w.factories(log), fakeMover{w.log})
	w.srv.SetPrograms(recordingPrograms{w.log}, recordingPrograms{w.log})
	t.Cleanup(w.srv.Wait) // the eBPF work Setup and Free leave running
	sock := filepath.Join(nodetest.Dir(t), "p.sock")
	g := rpc.NewServer(rpc.ServerConfig{SocketPath: sock, Logger: log})
	provisionerv1.RegisterProvisionerServiceServer(g.GRPC(), w.srv)
	done := make(chan error, 1)
	go func() { done <- g.Serve() }()
	conn, err := rpc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := w.srv
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
		srv.Close()
	})
	w.conn = conn
	if _, err := w.srv.Configure(ctxFor(t), cfg); err != nil {
		t.Fatalf("configuring: %v", err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := w.srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, "dummy0"); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("dummy0 never published")
		}
	}
}

// state is what a refused call must not change: the calls that reached a
// manager, the mover or the programs, and each manager's configuration.
func (w *hostileWorld) state(*testing.T) any {
	w.log.mu.Lock()
	calls := slices.Clone(w.log.calls)
	w.log.mu.Unlock()
	ms := w.srv.managers
	ms.mu.Lock()
	defer ms.mu.Unlock()
	configs := map[string]proto.Message{}
	for kind, r := range ms.running {
		configs[kind.String()+" sysfs="+r.sysfsRoot] = r.config
	}
	return struct {
		Calls   []string
		Configs map[string]proto.Message
	}{calls, configs}
}

// TestHostileRequests sends every ProvisionerService method, over the real
// socket, the zero request and each base varied field by field (1 MiB
// strings and bytes, 10,000-entry lists and maps, enum 999, extreme
// integers): the answer is success or InvalidArgument naming the field,
// and a refused request reaches no manager, mover or program and leaves
// the managers' configuration as it was.
func TestHostileRequests(t *testing.T) {
	if testing.Short() {
		t.Skip("sends thousands of requests, some of MiBs")
	}
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	w := &hostileWorld{hostPath: "/var/run/netns/" + nodetest.Netns(t, "ndhost"), sysfs: t.TempDir()}
	for _, d := range []string{"class/net", "bus/pci/devices"} {
		if err := os.MkdirAll(filepath.Join(w.sysfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &provisionerv1.ConfigureRequest{SysfsRoot: w.sysfs, Managers: &provisionerv1.ManagerConfigs{
		Sriov: &provisionerv1.SriovConfig{Enabled: true, Ifaces: []*provisionerv1.SriovInterface{{IfName: "ens1f0"}},
			SysBusPciDevPath: filepath.Join(w.sysfs, "bus/pci/devices")},
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 2},
		Host: &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth*"}, Drivers: []string{"virtio_net"},
			VendorIds: []string{"0x1af4"}, DeviceIds: []string{"0x1041"}, KeepEbpfProgramsPools: []string{"p"}},
	}}
	pd := &devicev1.PreparedDevice{
		Device:       &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0", MacAddress: "02:00:00:00:00:01", Mtu: 1500},
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0", MacAddress: "02:00:00:00:00:01", Mtu: 1500},
		LinkCreated:  true,
	}
	devCfg := &devicev1.DeviceConfig{PodIfName: "net1", Vlan: new(uint32(5)), VlanQos: new(uint32(1)), VlanProto: devicev1.VlanProto_VLAN_PROTO_8021Q,
		MacAddress: "02:00:00:00:00:02", SpoofChk: new(true), Mtu: 1400, Addresses: []string{"10.0.0.2/24", "fd00::2/64"},
		Routes: []*devicev1.Route{{Destination: "0.0.0.0/0", Gateway: "10.0.0.1"}}, IpPools: []string{"v4"}}
	data, err := protojson.Marshal(pd)
	if err != nil {
		t.Fatal(err)
	}
	bases := map[string][]proto.Message{
		"Configure":    {cfg},
		"WatchDevices": {&provisionerv1.WatchDevicesRequest{}},
		"Setup": {&provisionerv1.SetupRequest{DeviceName: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
			Config: devCfg, Pool: "p"}},
		"Free":           {&provisionerv1.FreeRequest{PreparedDevice: pd, Config: devCfg}},
		"Attach":         {&provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: devCfg}},
		"Detach":         {&provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: devCfg}},
		"Restore":        {&provisionerv1.RestoreRequest{Data: data}},
		"DeviceCounters": {&provisionerv1.DeviceCountersRequest{Devices: []string{"dummy0", "dummy1"}}},
	}
	hostiletest.Run(t, provisionerv1.File_netdra_provisioner_v1_provisioner_proto.Services().ByName("ProvisionerService"), bases, &hostiletest.Target{
		Conn:  func() grpc.ClientConnInterface { return w.conn },
		State: w.state,
		Reset: func(t *testing.T) { w.start(t, cfg) },
	})
}
