package server

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/rpc"
)

// fakeManager publishes what it is told and records the calls it gets.
type fakeManager struct {
	kind    devicev1.DeviceManager
	devices chan []*devicev1.Device
	log     *callLog
	setupFn func(dev *devicev1.Device) (*devicev1.PreparedDevice, error)
}

var _ manager.Manager = (*fakeManager)(nil)

type callLog struct {
	mu    sync.Mutex
	calls []string
}

func (l *callLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, s)
}

func (l *callLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.calls
	l.calls = nil
	return c
}

func (m *fakeManager) Run(ctx context.Context, publish func([]*devicev1.Device)) error {
	m.log.add("run " + m.kind.String())
	defer m.log.add("stop " + m.kind.String())
	for {
		select {
		case <-ctx.Done():
			return nil
		case d := <-m.devices:
			publish(d)
		}
	}
}

func (m *fakeManager) Setup(_ context.Context, dev *devicev1.Device, _ *devicev1.DeviceConfig, _ string) (*devicev1.PreparedDevice, error) {
	m.log.add("setup " + dev.GetName())
	if m.setupFn != nil {
		return m.setupFn(dev)
	}
	return &devicev1.PreparedDevice{Device: dev, OriginalLink: &devicev1.LinkSnapshot{Name: dev.GetKernelIfName()}}, nil
}

func (m *fakeManager) Free(_ context.Context, pd *devicev1.PreparedDevice) error {
	m.log.add("free " + pd.GetDevice().GetName())
	return nil
}

func (m *fakeManager) Validate(_ *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if cfg.Vlan != nil {
		return fielderr.New("config.vlan", "not supported by the fake manager")
	}
	return nil
}

type fakeMover struct{ log *callLog }

func (f fakeMover) Attach(_ context.Context, ifName string, _ *devicev1.LinkSnapshot, netns string, cfg *devicev1.DeviceConfig) error {
	f.log.add("attach " + ifName + " " + netns + " " + cfg.GetPodIfName())
	return nil
}

func (f fakeMover) Detach(_ context.Context, orig *devicev1.LinkSnapshot, netns string, _ *devicev1.DeviceConfig) error {
	f.log.add("detach " + orig.GetName() + " " + netns)
	return nil
}

func (f fakeMover) AttachRDMA(_ context.Context, dev, netns string) error {
	f.log.add("attachRDMA " + dev + " " + netns)
	return nil
}

func (fakeMover) HostNetns() string { return "/proc/self/ns/net" }

func (f fakeMover) ReadSettings(context.Context, string, *devicev1.LinkSettings) (*devicev1.LinkSettings, error) {
	return nil, nil
}

func (f fakeMover) ResumeLease(context.Context, *devicev1.LinkSnapshot, string, *devicev1.DeviceConfig) error {
	return nil
}

func (f fakeMover) CheckBack(context.Context, *devicev1.LinkSnapshot, *devicev1.DeviceConfig) error {
	return nil
}

func (f fakeMover) DetachRDMA(_ context.Context, dev, netns string) error {
	f.log.add("detachRDMA " + dev + " " + netns)
	return nil
}

func (f fakeMover) Create(_ context.Context, orig *devicev1.LinkSnapshot, netns string, cfg *devicev1.DeviceConfig) error {
	f.log.add("create " + orig.GetName() + " " + netns + " " + cfg.GetPodIfName())
	return nil
}

func (f fakeMover) Remove(_ context.Context, orig *devicev1.LinkSnapshot, netns string, _ *devicev1.DeviceConfig) error {
	f.log.add("remove " + orig.GetName() + " " + netns)
	return nil
}

// setupOf is the Setup request for d with cfg, naming d by its name and
// manager as dra and nri do.
func setupOf(d *devicev1.Device, cfg *devicev1.DeviceConfig) *provisionerv1.SetupRequest {
	return &provisionerv1.SetupRequest{DeviceName: d.GetName(), Manager: d.GetManager(), Config: cfg}
}

// withPool sets req's pool and returns req.
func withPool(req *provisionerv1.SetupRequest, pool string) *provisionerv1.SetupRequest {
	req.Pool = pool
	return req
}

type harness struct {
	client provisionerv1.ProvisionerServiceClient
	log    *callLog
	srv    *Server
	dummy  *fakeManager // the latest built
	mu     sync.Mutex
}

// publish has the latest dummy manager publish devs and waits until the
// server's inventory holds them.
func (h *harness) publish(t *testing.T, devs ...*devicev1.Device) {
	t.Helper()
	h.latestDummy().devices <- devs
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := h.srv.inv.find(devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, devs[0].GetName()); ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("inventory never updated")
		}
	}
}

func (h *harness) latestDummy() *fakeManager {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.dummy
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	h := &harness{log: &callLog{}}
	factories := Factories{
		Sriov: func(string, *provisionerv1.SriovConfig, PreparedVFs, func([]string)) (manager.Manager, error) {
			return nil, fielderr.New("ifaces[0].ifName", "required")
		},
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) {
			if c.GetCount() > 1024 {
				return nil, fielderr.New("count", "%d is more than 1024", c.GetCount())
			}
			m := &fakeManager{kind: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, devices: make(chan []*devicev1.Device, 4), log: h.log}
			h.mu.Lock()
			h.dummy = m
			h.mu.Unlock()
			h.log.add("build dummy")
			return m, nil
		},
		Host: func(root string, _ *provisionerv1.HostConfig) (manager.Manager, error) {
			h.log.add("build host sysfs=" + root)
			return &fakeManager{kind: devicev1.DeviceManager_DEVICE_MANAGER_HOST, devices: make(chan []*devicev1.Device, 4), log: h.log}, nil
		},
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	srv := New(log, factories, fakeMover{h.log})
	h.srv = srv
	dir, err := os.MkdirTemp("", "pv")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "p.sock")
	g := rpc.NewServer(rpc.ServerConfig{SocketPath: sock, Logger: log})
	provisionerv1.RegisterProvisionerServiceServer(g.GRPC(), srv)
	done := make(chan error, 1)
	go func() { done <- g.Serve() }()
	conn, err := rpc.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		g.Stop()
		<-done
		srv.Close()
		os.RemoveAll(dir)
	})
	h.client = provisionerv1.NewProvisionerServiceClient(conn)
	return h
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func dummyCfg(count uint32) *provisionerv1.ConfigureRequest {
	return &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
		Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: count}}}
}

// TestConfigure_Lifecycle starts, keeps, reconfigures and stops managers
// without a restart; a bad config changes nothing.
func TestConfigure_Lifecycle(t *testing.T) {
	h := newHarness(t)
	ctx := ctxFor(t)
	steps := []struct {
		name      string
		req       *provisionerv1.ConfigureRequest
		wantCode  codes.Code
		wantField string
		wantCalls []string
	}{
		{name: "start dummy", req: dummyCfg(2), wantCalls: []string{"build dummy", "run DEVICE_MANAGER_DUMMY"}},
		{name: "same config keeps it running", req: dummyCfg(2)},
		{name: "bad config changes nothing", req: dummyCfg(5000), wantCode: codes.InvalidArgument, wantField: "managers.dummy.count"},
		{name: "bad sriov config stops nothing", req: &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{
			Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 3}, Sriov: &provisionerv1.SriovConfig{Enabled: true}}},
			wantCode: codes.InvalidArgument, wantField: "managers.sriov.ifaces[0].ifName"},
		{name: "new config restarts it", req: dummyCfg(3), wantCalls: []string{"build dummy", "stop DEVICE_MANAGER_DUMMY", "run DEVICE_MANAGER_DUMMY"}},
		{name: "disabled stops it", req: &provisionerv1.ConfigureRequest{}, wantCalls: []string{"stop DEVICE_MANAGER_DUMMY"}},
	}
	for _, st := range steps {
		_, err := h.client.Configure(ctx, st.req)
		if got := status.Code(err); got != st.wantCode {
			t.Fatalf("%s: code %v (%v), want %v", st.name, got, err, st.wantCode)
		}
		if st.wantField != "" && !strings.Contains(status.Convert(err).Message(), st.wantField+":") {
			t.Errorf("%s: error %q does not name %s", st.name, status.Convert(err).Message(), st.wantField)
		}
		// Run and stop happen on the manager's goroutine: wait for them.
		var got []string
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < len(st.wantCalls) && time.Now().Before(deadline) {
			got = append(got, h.log.take()...)
			time.Sleep(5 * time.Millisecond)
		}
		if diff := cmp.Diff(st.wantCalls, got); diff != "" {
			t.Errorf("%s: calls (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestWatchDevices sends every manager's inventory at once, then each
// change; a disabled manager's inventory becomes empty.
func TestWatchDevices(t *testing.T) {
	h := newHarness(t)
	ctx := ctxFor(t)
	if _, err := h.client.Configure(ctx, dummyCfg(1)); err != nil {
		t.Fatal(err)
	}
	stream, err := h.client.WatchDevices(ctx, &provisionerv1.WatchDevicesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	recv := func() string {
		r, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, d := range r.GetDevices() {
			names = append(names, d.GetName()+"/"+d.GetManager().String())
		}
		return r.GetManager().String() + ": " + strings.Join(names, ",")
	}
	first := []string{recv(), recv(), recv(), recv()}
	want := []string{"DEVICE_MANAGER_SRIOV: ", "DEVICE_MANAGER_DUMMY: ", "DEVICE_MANAGER_HOST: ", "DEVICE_MANAGER_SUBIF: "}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first snapshot (-want +got):\n%s", diff)
	}
	h.latestDummy().devices <- []*devicev1.Device{{Name: "dummy0", KernelIfName: "dummy0"}}
	if got, want := recv(), "DEVICE_MANAGER_DUMMY: dummy0/DEVICE_MANAGER_DUMMY"; got != want {
		t.Errorf("after publish: %q, want %q", got, want)
	}
	if _, err := h.client.Configure(ctx, &provisionerv1.ConfigureRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, want := recv(), "DEVICE_MANAGER_DUMMY: "; got != want {
		t.Errorf("after disable: %q, want %q", got, want)
	}
}

func TestSetupFreeAttachDetach(t *testing.T) {
	h := newHarness(t)
	ctx := ctxFor(t)
	if _, err := h.client.Configure(ctx, dummyCfg(1)); err != nil {
		t.Fatal(err)
	}
	dev := &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}
	h.publish(t, &devicev1.Device{Name: "dummy0", KernelIfName: "dummy0"})
	resp, err := h.client.Setup(ctx, setupOf(dev, &devicev1.DeviceConfig{PodIfName: "net1"}))
	if err != nil {
		t.Fatal(err)
	}
	pd := resp.GetPreparedDevice()
	// The provisioner's own copy of the device is what was set up.
	if pd.GetDevice().GetKernelIfName() != "dummy0" {
		t.Errorf("prepared %v, want the inventory's device", pd)
	}
	cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
	if _, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: cfg}); err != nil {
		t.Fatal(err)
	}
	// A vfio-bound VF has no interface to move.
	vfio := &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "0000-03-00-1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}}
	if _, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: vfio, NetnsPath: "/var/run/netns/pod"}); err != nil {
		t.Fatal(err)
	}
	// Free works after the manager was disabled.
	if _, err := h.client.Configure(ctx, &provisionerv1.ConfigureRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: pd}); err != nil {
		t.Fatal(err)
	}
	want := []string{"build dummy", "run DEVICE_MANAGER_DUMMY", "setup dummy0", "attach dummy0 /var/run/netns/pod net1",
		"detach dummy0 /var/run/netns/pod", "stop DEVICE_MANAGER_DUMMY", "free dummy0"}
	if diff := cmp.Diff(want, h.log.take()); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestBadInput: every bad value is InvalidArgument naming the field, or the
// code that says why, and no manager or mover is called.
func TestBadInput(t *testing.T) {
	h := newHarness(t)
	ctx := ctxFor(t)
	if _, err := h.client.Configure(ctx, dummyCfg(1)); err != nil {
		t.Fatal(err)
	}
	h.publish(t, &devicev1.Device{Name: "dummy0", KernelIfName: "dummy0"})
	h.log.take()
	dev := &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}
	pd := &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "dummy0", KernelIfName: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY},
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0"}}
	vlan := uint32(5)
	tests := []struct {
		name      string
		call      func() error
		wantCode  codes.Code
		wantField string
	}{
		{"setup without device", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{})
			return err
		}, codes.InvalidArgument, "deviceName"},
		{"setup of a device without its manager", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: "dummy0"})
			return err
		}, codes.InvalidArgument, "manager"},
		{"setup with a bad podIfName", func() error {
			_, err := h.client.Setup(ctx, setupOf(dev, &devicev1.DeviceConfig{PodIfName: "a/b"}))
			return err
		}, codes.InvalidArgument, "config.podIfName"},
		{"setup with a bad address", func() error {
			_, err := h.client.Setup(ctx, setupOf(dev, &devicev1.DeviceConfig{Addresses: []string{"10.0.0.1/24", "nope"}}))
			return err
		}, codes.InvalidArgument, "config.addresses[1]"},
		{"setup with a setting the manager lacks", func() error {
			_, err := h.client.Setup(ctx, setupOf(dev, &devicev1.DeviceConfig{Vlan: &vlan}))
			return err
		}, codes.InvalidArgument, "config.vlan"},
		{"setup of an unknown device", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: "dummy7", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY})
			return err
		}, codes.NotFound, ""},
		{"setup on a manager that is not running", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST})
			return err
		}, codes.FailedPrecondition, ""},
		{"attach with a relative netns", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "netns/pod"})
			return err
		}, codes.InvalidArgument, "netnsPath"},
		{"attach with a bad MTU", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/run/netns/p", Config: &devicev1.DeviceConfig{Mtu: 10}})
			return err
		}, codes.InvalidArgument, "config.mtu"},
		{"attach without the original link", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: &devicev1.PreparedDevice{Device: pd.GetDevice()}, NetnsPath: "/run/netns/p"})
			return err
		}, codes.InvalidArgument, "preparedDevice.originalLink"},
		{"setup with an unknown manager", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: "dummy0", Manager: 999})
			return err
		}, codes.InvalidArgument, "manager"},
		{"setup of a device named like a path", func() error {
			_, err := h.client.Setup(ctx, &provisionerv1.SetupRequest{DeviceName: "../dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY})
			return err
		}, codes.InvalidArgument, "deviceName"},
		{"attach with a VLAN out of range", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/run/netns/p", Config: &devicev1.DeviceConfig{Vlan: new(uint32(70000))}})
			return err
		}, codes.InvalidArgument, "config.vlan"},
		{"attach with an unknown VLAN protocol", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/run/netns/p", Config: &devicev1.DeviceConfig{Vlan: new(uint32(7)), VlanProto: 999}})
			return err
		}, codes.InvalidArgument, "config.vlanProto"},
		{"attach to a path too long to open", func() error {
			_, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/run/netns/" + strings.Repeat("p", 4096)})
			return err
		}, codes.InvalidArgument, "netnsPath"},
		{"free of a VF snapshot no VF has", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: &devicev1.PreparedDevice{Device: pd.GetDevice(), OriginalLink: pd.GetOriginalLink(),
				OriginalVf: &devicev1.VfSnapshot{Vlan: 5000}}})
			return err
		}, codes.InvalidArgument, "preparedDevice.originalVf.vlan"},
		{"free giving back a program pinned elsewhere", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: &devicev1.PreparedDevice{Device: pd.GetDevice(), OriginalLink: pd.GetOriginalLink(),
				DetachedEbpfPrograms: []*devicev1.EbpfProgram{{AttachPoint: devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_XDP, Pin: "/sys/fs/bpf/cilium/prog"}}}})
			return err
		}, codes.InvalidArgument, "preparedDevice.detachedEbpfPrograms[0].pin"},
		{"free giving back a program without an attach point", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: &devicev1.PreparedDevice{Device: pd.GetDevice(), OriginalLink: pd.GetOriginalLink(),
				DetachedEbpfPrograms: []*devicev1.EbpfProgram{{Pin: "/sys/fs/bpf/netdra-handoff/dummy0/x"}}}})
			return err
		}, codes.InvalidArgument, "preparedDevice.detachedEbpfPrograms[0].attachPoint"},
		{"counters of a device named like a path", func() error {
			_, err := h.client.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{Devices: []string{"dummy0", "../../x"}})
			return err
		}, codes.InvalidArgument, "devices[1]"},
		{"free without a device", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{})
			return err
		}, codes.InvalidArgument, "preparedDevice"},
		{"free on a manager never configured", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "x", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV}}})
			return err
		}, codes.FailedPrecondition, ""},
		{"restore garbage", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"d","bogus":1}}`)})
			return err
		}, codes.InvalidArgument, "data"},
		{"free of a device named like a path", func() error {
			_, err := h.client.Free(ctx, &provisionerv1.FreeRequest{PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: "..", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}}})
			return err
		}, codes.InvalidArgument, "preparedDevice.device.name"},
		{"restore of a device named like a path", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"a/../../b","manager":"DEVICE_MANAGER_HOST"}}`)})
			return err
		}, codes.InvalidArgument, "data.device.name"},
		{"restore with a bad original link name", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"eth1","manager":"DEVICE_MANAGER_HOST","kernelIfName":"eth1"},"originalLink":{"name":"eth 1"}}`)})
			return err
		}, codes.InvalidArgument, "data.originalLink.name"},
		{"restore with a bad original MAC", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"eth1","manager":"DEVICE_MANAGER_HOST","kernelIfName":"eth1"},"originalLink":{"name":"eth1","macAddress":"nope"}}`)})
			return err
		}, codes.InvalidArgument, "data.originalLink.macAddress"},
		{"setup asking vfio of a dummy", func() error {
			_, err := h.client.Setup(ctx, setupOf(dev, &devicev1.DeviceConfig{Vfio: new(true)}))
			return err
		}, codes.InvalidArgument, "config.vfio"},
		{"restore with a device node outside /dev", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"vf","manager":"DEVICE_MANAGER_SRIOV"},"deviceNodes":[{"hostPath":"/dev/vfio/1","path":"/etc/passwd"}]}`)})
			return err
		}, codes.InvalidArgument, "data.deviceNodes[0].path"},
		{"restore with a relative device node", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"vf","manager":"DEVICE_MANAGER_SRIOV"},"deviceNodes":[{"hostPath":"dev/vfio/1","path":"/dev/vfio/1"}]}`)})
			return err
		}, codes.InvalidArgument, "data.deviceNodes[0].hostPath"},
		{"restore with a device node twice", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"vf","manager":"DEVICE_MANAGER_SRIOV"},"deviceNodes":[{"hostPath":"/dev/vfio/1","path":"/dev/vfio/1"},{"hostPath":"/dev/vfio/2","path":"/dev/vfio/1"}]}`)})
			return err
		}, codes.InvalidArgument, "data.deviceNodes[1].path"},
		{"restore without a manager", func() error {
			_, err := h.client.Restore(ctx, &provisionerv1.RestoreRequest{Data: []byte(`{"device":{"name":"d"}}`)})
			return err
		}, codes.InvalidArgument, "data.device.manager"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := status.Code(err); got != tt.wantCode {
				t.Fatalf("code %v (%v), want %v", got, err, tt.wantCode)
			}
			if tt.wantField != "" && !strings.Contains(status.Convert(err).Message(), tt.wantField+":") {
				t.Errorf("error %q does not name %s", status.Convert(err).Message(), tt.wantField)
			}
		})
	}
	if calls := h.log.take(); len(calls) != 0 {
		t.Errorf("bad input reached the node: %q", calls)
	}
}

func TestRestore(t *testing.T) {
	h := newHarness(t)
	if _, err := h.client.Configure(ctxFor(t), dummyCfg(1)); err != nil {
		t.Fatal(err)
	}
	dev := &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, KernelIfName: "dummy0", Driver: "dummy"}
	h.publish(t, dev)
	want := &devicev1.PreparedDevice{
		Device:       proto.CloneOf(dev),
		OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0", MacAddress: "02:00:00:00:00:01", Mtu: 1500},
		LinkCreated:  true,
	}
	// The status's device is replaced by the inventory's (its driver).
	stale := proto.CloneOf(want)
	stale.Device.Driver, stale.Device.Mtu = "", 9000
	data, err := protojson.Marshal(stale)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := h.client.Restore(ctxFor(t), &provisionerv1.RestoreRequest{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, resp.GetPreparedDevice(), protocmp.Transform()); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestConfigure_SysfsRoot: the sysfs root Configure names is validated and
// handed to the managers that read sysfs; changing it rebuilds those
// managers only, and a bad one changes nothing.
func TestConfigure_SysfsRoot(t *testing.T) {
	h := newHarness(t)
	ctx := ctxFor(t)
	root := t.TempDir()
	file := filepath.Join(root, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(sysfs string) *provisionerv1.ConfigureRequest {
		return &provisionerv1.ConfigureRequest{SysfsRoot: sysfs, Managers: &provisionerv1.ManagerConfigs{
			Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 1},
			Host:  &provisionerv1.HostConfig{Enabled: true, IfNames: []string{"eth9"}}}}
	}
	steps := []struct {
		name      string
		req       *provisionerv1.ConfigureRequest
		wantErr   string
		wantCalls []string
	}{
		{name: "default root", req: cfg(""), wantCalls: []string{"build dummy", "build host sysfs=", "run DEVICE_MANAGER_DUMMY", "run DEVICE_MANAGER_HOST"}},
		{name: "a root rebuilds the host manager only", req: cfg(root),
			wantCalls: []string{"build host sysfs=" + root, "stop DEVICE_MANAGER_HOST", "run DEVICE_MANAGER_HOST"}},
		{name: "same root keeps it", req: cfg(root)},
		{name: "relative", req: cfg("host/sys"), wantErr: `sysfsRoot: "host/sys" is not a clean absolute path`},
		{name: "not clean", req: cfg(root + "/../sys"), wantErr: "is not a clean absolute path"},
		{name: "missing", req: cfg(root + "/missing"), wantErr: "cannot be used: no such file or directory"},
		{name: "a file", req: cfg(file), wantErr: "is not a directory"},
	}
	for _, st := range steps {
		_, err := h.client.Configure(ctx, st.req)
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.wantErr != "" && (status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), st.wantErr)):
			t.Fatalf("%s: error %v, want InvalidArgument with %q", st.name, err, st.wantErr)
		}
		var got []string
		deadline := time.Now().Add(5 * time.Second)
		for len(got) < len(st.wantCalls) && time.Now().Before(deadline) {
			got = append(got, h.log.take()...)
			time.Sleep(5 * time.Millisecond)
		}
		got = append(got, h.log.take()...)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(st.wantCalls))
		if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: calls (-want +got):\n%s", st.name, diff)
		}
	}
}

// TestAttachDetach_CreatedOrMoved: a dummy link netdra creates is made in
// the pod and deleted there (no namespace move); every other link is moved
// in and out. The prepared device goes through Restore first, as after a
// restart.
func TestAttachDetach_CreatedOrMoved(t *testing.T) {
	dev := func(m devicev1.DeviceManager, name string) *devicev1.Device {
		return &devicev1.Device{Name: name, Manager: m, KernelIfName: name}
	}
	const dummy, host, sriov = devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, devicev1.DeviceManager_DEVICE_MANAGER_HOST, devicev1.DeviceManager_DEVICE_MANAGER_SRIOV
	for _, tc := range []struct {
		name string
		pd   *devicev1.PreparedDevice
		want []string
	}{
		{"created dummy", &devicev1.PreparedDevice{Device: dev(dummy, "dummy0"), LinkCreated: true,
			OriginalLink: &devicev1.LinkSnapshot{Name: "dummy0", MacAddress: "02:00:00:00:00:01", Mtu: 1500}},
			[]string{"create dummy0 /var/run/netns/pod net1", "remove dummy0 /var/run/netns/pod"}},
		{"created dummy without original link (guessed)", &devicev1.PreparedDevice{Device: dev(dummy, "dummy1"), LinkCreated: true},
			[]string{"create dummy1 /var/run/netns/pod net1", "remove dummy1 /var/run/netns/pod"}},
		{"host interface", &devicev1.PreparedDevice{Device: dev(host, "eth1"), OriginalLink: &devicev1.LinkSnapshot{Name: "eth1"}},
			[]string{"attach eth1 /var/run/netns/pod net1", "detach eth1 /var/run/netns/pod"}},
		{"sr-iov VF", &devicev1.PreparedDevice{Device: dev(sriov, "ens1f0v0"), OriginalLink: &devicev1.LinkSnapshot{Name: "ens1f0v0"}},
			[]string{"attach ens1f0v0 /var/run/netns/pod net1", "detach ens1f0v0 /var/run/netns/pod"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			ctx := ctxFor(t)
			cfg := &devicev1.DeviceConfig{PodIfName: "net1"}
			// As a restarted dra has it: through the claim status (Restore's
			// checks against the inventory: restore_test.go).
			data, err := protojson.Marshal(tc.pd)
			if err != nil {
				t.Fatal(err)
			}
			pd := &devicev1.PreparedDevice{}
			if err := protojson.Unmarshal(data, pd); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Attach(ctx, &provisionerv1.AttachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: cfg}); err != nil {
				t.Fatal(err)
			}
			if _, err := h.client.Detach(ctx, &provisionerv1.DetachRequest{PreparedDevice: pd, NetnsPath: "/var/run/netns/pod", Config: cfg}); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, h.log.take()); diff != "" {
				t.Errorf("calls (-want +got):\n%s", diff)
			}
		})
	}
}
