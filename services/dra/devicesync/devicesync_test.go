package devicesync

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

type calls struct {
	mu  sync.Mutex
	log []string
}

func (c *calls) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.log = append(c.log, s)
}

func (c *calls) get() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.log...)
}

// fakeProvisioner streams inventories from a channel; a nil message breaks
// the stream, as a provisioner restart does.
type fakeProvisioner struct {
	calls *calls
	feed  chan *provisionerv1.WatchDevicesResponse
}

func (f *fakeProvisioner) Configure(_ context.Context, r *provisionerv1.ConfigureRequest, _ ...grpc.CallOption) (*provisionerv1.ConfigureResponse, error) {
	f.calls.add("configure " + r.String())
	if r.GetManagers().GetDummy().GetCount() > 100 {
		return nil, errors.New("count: too many")
	}
	return &provisionerv1.ConfigureResponse{}, nil
}

func (f *fakeProvisioner) WatchDevices(ctx context.Context, _ *provisionerv1.WatchDevicesRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[provisionerv1.WatchDevicesResponse], error) {
	f.calls.add("watch")
	return &stream{ctx: ctx, feed: f.feed}, nil
}

type stream struct {
	grpc.ClientStream
	ctx  context.Context
	feed chan *provisionerv1.WatchDevicesResponse
}

func (s *stream) Recv() (*provisionerv1.WatchDevicesResponse, error) {
	select {
	case m := <-s.feed:
		if m == nil {
			return nil, io.ErrUnexpectedEOF
		}
		return m, nil
	case <-s.ctx.Done():
		return nil, s.ctx.Err()
	}
}

// fakeState lists allocs (or fails with listErr) and records the
// replaced inventories.
type fakeState struct {
	calls   *calls
	mu      sync.Mutex
	allocs  []*statev1.Allocation
	listErr error
}

func (f *fakeState) ListAllocations(context.Context, *statev1.ListAllocationsRequest, ...grpc.CallOption) (*statev1.ListAllocationsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.listErr != nil {
		return nil, f.listErr
	}
	return &statev1.ListAllocationsResponse{Allocations: f.allocs}, nil
}

func (f *fakeState) set(err error, allocs ...*statev1.Allocation) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.allocs, f.listErr = allocs, err
}

var (
	_ Provisioner = (*fakeProvisioner)(nil)
	_ State       = (*fakeState)(nil)
)

func (f *fakeState) ReplaceDevices(_ context.Context, r *statev1.ReplaceDevicesRequest, _ ...grpc.CallOption) (*statev1.ReplaceDevicesResponse, error) {
	names := r.GetManager().String()
	for _, d := range r.GetDevices() {
		names += " " + d.GetName()
	}
	f.calls.add("replace " + names)
	return &statev1.ReplaceDevicesResponse{}, nil
}

func waitCalls(t *testing.T, c *calls, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); len(c.get()) < n; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("got %q, want %d calls", c.get(), n)
		}
	}
	return c.get()
}

func TestPump(t *testing.T) {
	c := &calls{}
	prov := &fakeProvisioner{calls: c, feed: make(chan *provisionerv1.WatchDevicesResponse, 8)}
	p := New(slog.New(slog.DiscardHandler), prov, &fakeState{calls: c})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	cfg := &provisionerv1.ConfigureRequest{SysfsRoot: "/host/sys",
		Managers: &provisionerv1.ManagerConfigs{Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 1}}}
	bad := &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{Dummy: &provisionerv1.DummyConfig{Enabled: true, Count: 500}}}
	if _, err := p.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	// A refused config leaves the good one in force.
	if _, err := p.Configure(ctx, bad); err == nil {
		t.Fatal("a refused config was accepted")
	}
	go p.Run(ctx)
	dummy := devicev1.DeviceManager_DEVICE_MANAGER_DUMMY
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: dummy, Devices: []*devicev1.Device{{Name: "dummy0"}}}
	prov.feed <- nil // the provisioner restarts
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: dummy, Devices: []*devicev1.Device{{Name: "dummy0"}, {Name: "dummy1"}}}
	good := "configure " + withList(cfg, nil).String()
	want := []string{good, "configure " + withList(bad, nil).String(),
		good, "watch", "replace DEVICE_MANAGER_DUMMY dummy0",
		good, "watch", "replace DEVICE_MANAGER_DUMMY dummy0 dummy1"}
	if diff := cmp.Diff(want, waitCalls(t, c, len(want))); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// A restarted state service gets each manager's last inventory again,
// though the provisioner sends nothing new.
func TestPump_ResendAfterStateRestart(t *testing.T) {
	c := &calls{}
	prov := &fakeProvisioner{calls: c, feed: make(chan *provisionerv1.WatchDevicesResponse, 8)}
	p := New(slog.New(slog.DiscardHandler), prov, &fakeState{calls: c})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, Devices: []*devicev1.Device{{Name: "eth1"}}}
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, Devices: []*devicev1.Device{{Name: "dummy0"}}}
	waitCalls(t, c, 3)
	p.Resend()
	got := waitCalls(t, c, 5)
	want := []string{"watch", "replace DEVICE_MANAGER_HOST eth1", "replace DEVICE_MANAGER_DUMMY dummy0"}
	if diff := cmp.Diff(want, got[:3]); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	again := got[3:]
	slices.Sort(again)
	if diff := cmp.Diff([]string{"replace DEVICE_MANAGER_DUMMY dummy0", "replace DEVICE_MANAGER_HOST eth1"}, again); diff != "" {
		t.Errorf("resent (-want +got):\n%s", diff)
	}
}

// withList is cfg as the pump sends it with the VFs vfs and the devices
// all allocated.
func withList(cfg *provisionerv1.ConfigureRequest, vfs []string, all ...string) *provisionerv1.ConfigureRequest {
	out := proto.CloneOf(cfg)
	out.PreparedVfs = &provisionerv1.PreparedVfs{Devices: append([]string{}, vfs...)}
	out.PreparedDevices = &provisionerv1.PreparedDevices{Devices: append([]string{}, all...)}
	return out
}

func alloc(m devicev1.DeviceManager, device string) *statev1.Allocation {
	return &statev1.Allocation{Manager: m, DeviceName: device, ClaimUid: "uid-" + device}
}

// TestPump_PreparedVFs: every configuration sent, the first and each
// re-sent one, lists the devices the state service has allocations of as
// it is sent, and the SR-IOV VFs among them, once each, sorted; when they
// cannot be listed it goes without the lists (the provisioner keeps its
// last ones).
func TestPump_PreparedVFs(t *testing.T) {
	c := &calls{}
	prov := &fakeProvisioner{calls: c, feed: make(chan *provisionerv1.WatchDevicesResponse, 8)}
	st := &fakeState{calls: c}
	sriov, dummy := devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, devicev1.DeviceManager_DEVICE_MANAGER_DUMMY
	// A shared VF has a row per share: listed once.
	st.set(nil, alloc(sriov, "vf-b"), alloc(dummy, "dummy0"), alloc(sriov, "vf-a"), alloc(sriov, "vf-b"))
	p := New(slog.New(slog.DiscardHandler), prov, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := &provisionerv1.ConfigureRequest{Managers: &provisionerv1.ManagerConfigs{Sriov: &provisionerv1.SriovConfig{Enabled: true}}}
	if _, err := p.Configure(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	st.set(nil, alloc(sriov, "vf-c"))
	go p.Run(ctx)
	waitCalls(t, c, 3)
	st.set(errors.New("state down"))
	prov.feed <- nil // the provisioner restarts
	want := []string{"configure " + withList(cfg, []string{"vf-a", "vf-b"}, "dummy0", "vf-a", "vf-b").String(),
		"configure " + withList(cfg, []string{"vf-c"}, "vf-c").String(), "watch",
		"configure " + cfg.String(), "watch"}
	if diff := cmp.Diff(want, waitCalls(t, c, len(want))); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

// TestPump_Warnings: each message's warnings go to OnWarnings; a message
// that only changes them is not copied into the state service again.
func TestPump_Warnings(t *testing.T) {
	c := &calls{}
	prov := &fakeProvisioner{calls: c, feed: make(chan *provisionerv1.WatchDevicesResponse, 8)}
	p := New(slog.New(slog.DiscardHandler), prov, &fakeState{calls: c})
	p.OnWarnings(func(m devicev1.DeviceManager, w []string) {
		c.add(fmt.Sprintf("warnings %s %q", m, w))
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go p.Run(ctx)
	sriov := devicev1.DeviceManager_DEVICE_MANAGER_SRIOV
	vfs := []*devicev1.Device{{Name: "vf-a"}}
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: sriov, Devices: vfs, Warnings: []string{"PF ens1f0: vfCount 4 waits"}}
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: sriov, Devices: vfs}
	prov.feed <- &provisionerv1.WatchDevicesResponse{Manager: sriov, Devices: []*devicev1.Device{{Name: "vf-b"}}}
	want := []string{"watch",
		"replace DEVICE_MANAGER_SRIOV vf-a", `warnings DEVICE_MANAGER_SRIOV ["PF ens1f0: vfCount 4 waits"]`,
		`warnings DEVICE_MANAGER_SRIOV []`,
		"replace DEVICE_MANAGER_SRIOV vf-b", `warnings DEVICE_MANAGER_SRIOV []`}
	if diff := cmp.Diff(want, waitCalls(t, c, len(want))); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}
