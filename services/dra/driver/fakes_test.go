package driver

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	resourceapi "k8s.io/api/resource/v1"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// recorder is the order of the calls made to every fake.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (r *recorder) add(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, fmt.Sprintf(format, args...))
}

// get returns the calls, without those starting with one of the prefixes.
func (r *recorder) get(without ...string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []string{}
	for _, c := range r.calls {
		if !slices.ContainsFunc(without, func(p string) bool { return strings.HasPrefix(c, p) }) {
			out = append(out, c)
		}
	}
	return out
}

func keys[T interface{ GetPool() string }](items []T, name func(T) string) string {
	var s []string
	for _, it := range items {
		s = append(s, it.GetPool()+"/"+name(it))
	}
	return strings.Join(s, " ")
}

func allocNames(as []*statev1.Allocation) string {
	return keys(as, (*statev1.Allocation).GetDeviceName)
}

func keyNames(ks []*statev1.AllocationKey) string {
	return keys(ks, (*statev1.AllocationKey).GetDeviceName)
}

// fakeState is a StateClient whose methods call their XxxFunc, recording
// each call. newMemState fills the funcs with an in-memory table that
// follows the state service's rules; a test replaces the ones it needs.
type fakeState struct {
	rec                    *recorder
	ListDevicesFunc        func(*statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error)
	BeginPrepareFunc       func(*statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error)
	RecordPreparedFunc     func(*statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error)
	CommitPrepareFunc      func(*statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error)
	AbortPrepareFunc       func(*statev1.AbortPrepareRequest) (*statev1.AbortPrepareResponse, error)
	RestoreAllocationsFunc func(*statev1.RestoreAllocationsRequest) (*statev1.RestoreAllocationsResponse, error)
	ListAllocationsFunc    func(*statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error)
	MarkFreeFailedFunc     func(*statev1.MarkFreeFailedRequest) (*statev1.MarkFreeFailedResponse, error)
	DeleteAllocationFunc   func(*statev1.DeleteAllocationRequest) (*statev1.DeleteAllocationResponse, error)
}

var _ StateClient = (*fakeState)(nil)

func (f *fakeState) ListDevices(_ context.Context, in *statev1.ListDevicesRequest, _ ...grpc.CallOption) (*statev1.ListDevicesResponse, error) {
	f.rec.add("state.ListDevices")
	return f.ListDevicesFunc(in)
}

func (f *fakeState) BeginPrepare(_ context.Context, in *statev1.BeginPrepareRequest, _ ...grpc.CallOption) (*statev1.BeginPrepareResponse, error) {
	f.rec.add("state.BeginPrepare %s", allocNames(in.GetAllocations()))
	return f.BeginPrepareFunc(in)
}

func (f *fakeState) CommitPrepare(_ context.Context, in *statev1.CommitPrepareRequest, _ ...grpc.CallOption) (*statev1.CommitPrepareResponse, error) {
	var ks []*statev1.AllocationKey
	for _, a := range in.GetAllocations() {
		ks = append(ks, a.GetKey())
	}
	f.rec.add("state.CommitPrepare %s", keyNames(ks))
	return f.CommitPrepareFunc(in)
}

func (f *fakeState) RecordPrepared(_ context.Context, in *statev1.RecordPreparedRequest, _ ...grpc.CallOption) (*statev1.RecordPreparedResponse, error) {
	var ks []*statev1.AllocationKey
	for _, a := range in.GetAllocations() {
		ks = append(ks, a.GetKey())
	}
	f.rec.add("state.RecordPrepared %s", keyNames(ks))
	return f.RecordPreparedFunc(in)
}

func (f *fakeState) AbortPrepare(_ context.Context, in *statev1.AbortPrepareRequest, _ ...grpc.CallOption) (*statev1.AbortPrepareResponse, error) {
	f.rec.add("state.AbortPrepare %s", keyNames(in.GetKeys()))
	return f.AbortPrepareFunc(in)
}

func (f *fakeState) RestoreAllocations(_ context.Context, in *statev1.RestoreAllocationsRequest, _ ...grpc.CallOption) (*statev1.RestoreAllocationsResponse, error) {
	f.rec.add("state.RestoreAllocations %s", allocNames(in.GetAllocations()))
	return f.RestoreAllocationsFunc(in)
}

func (f *fakeState) ListAllocations(_ context.Context, in *statev1.ListAllocationsRequest, _ ...grpc.CallOption) (*statev1.ListAllocationsResponse, error) {
	var filter []string
	if in.GetClaimUid() != "" {
		filter = append(filter, "claim="+in.GetClaimUid())
	}
	if in.GetPodUid() != "" {
		filter = append(filter, "pod="+in.GetPodUid())
	}
	if in.GetPhase() != statev1.Phase_PHASE_UNSPECIFIED {
		filter = append(filter, "phase="+strings.TrimPrefix(in.GetPhase().String(), "PHASE_"))
	}
	f.rec.add("state.ListAllocations %s", strings.Join(filter, " "))
	return f.ListAllocationsFunc(in)
}

func (f *fakeState) MarkFreeFailed(_ context.Context, in *statev1.MarkFreeFailedRequest, _ ...grpc.CallOption) (*statev1.MarkFreeFailedResponse, error) {
	f.rec.add("state.MarkFreeFailed %s", keyNames([]*statev1.AllocationKey{in.GetKey()}))
	return f.MarkFreeFailedFunc(in)
}

func (f *fakeState) DeleteAllocation(_ context.Context, in *statev1.DeleteAllocationRequest, _ ...grpc.CallOption) (*statev1.DeleteAllocationResponse, error) {
	f.rec.add("state.DeleteAllocation %s", keyNames([]*statev1.AllocationKey{in.GetKey()}))
	return f.DeleteAllocationFunc(in)
}

// memState is the in-memory table behind newMemState's funcs.
type memState struct {
	mu      sync.Mutex
	devices []*devicev1.Device
	rows    map[string]*statev1.Allocation
}

// inventory is the devices of the table (the provisioner's inventory too).
func (m *memState) inventory() []*devicev1.Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.devices
}

func newMemState(rec *recorder, devices []*devicev1.Device, rows ...*statev1.Allocation) (*fakeState, *memState) {
	m := &memState{devices: devices, rows: map[string]*statev1.Allocation{}}
	for _, r := range rows {
		m.rows[keyString(r.GetPool(), r.GetDeviceName(), r.GetShareId())] = proto.CloneOf(r)
	}
	f := &fakeState{rec: rec}
	f.ListDevicesFunc = func(*statev1.ListDevicesRequest) (*statev1.ListDevicesResponse, error) {
		return &statev1.ListDevicesResponse{Devices: m.inventory()}, nil
	}
	f.BeginPrepareFunc = m.beginPrepare
	f.RecordPreparedFunc = m.recordPrepared
	f.CommitPrepareFunc = m.commitPrepare
	f.AbortPrepareFunc = m.abortPrepare
	f.RestoreAllocationsFunc = m.restoreAllocations
	f.ListAllocationsFunc = m.listAllocations
	f.MarkFreeFailedFunc = m.markFreeFailed
	f.DeleteAllocationFunc = m.deleteAllocation
	return f, m
}

// snapshot returns the rows in key order.
func (m *memState) snapshot() []*statev1.Allocation {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*statev1.Allocation
	for _, k := range slices.Sorted(mapKeys(m.rows)) {
		out = append(out, proto.CloneOf(m.rows[k]))
	}
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func (m *memState) beginPrepare(in *statev1.BeginPrepareRequest) (*statev1.BeginPrepareResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, a := range in.GetAllocations() {
		for _, r := range m.rows {
			if r.GetDeviceName() == a.GetDeviceName() && r.GetClaimUid() != a.GetClaimUid() &&
				(r.GetShareId() == "" || a.GetShareId() == "" || r.GetShareId() == a.GetShareId()) {
				return nil, status.Errorf(codes.AlreadyExists, "device %s is allocated to claim %s in pool %s: conflict", a.GetDeviceName(), r.GetClaimUid(), r.GetPool())
			}
		}
	}
	out := &statev1.BeginPrepareResponse{}
	for _, a := range in.GetAllocations() {
		k := keyString(a.GetPool(), a.GetDeviceName(), a.GetShareId())
		if _, ok := m.rows[k]; !ok {
			r := proto.CloneOf(a)
			r.Phase = statev1.Phase_PHASE_PREPARING
			m.rows[k] = r
		}
		out.Allocations = append(out.Allocations, proto.CloneOf(m.rows[k]))
	}
	return out, nil
}

func (m *memState) commitPrepare(in *statev1.CommitPrepareRequest) (*statev1.CommitPrepareResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range in.GetAllocations() {
		r, ok := m.rows[keyString(p.GetKey().GetPool(), p.GetKey().GetDeviceName(), p.GetKey().GetShareId())]
		switch {
		case !ok:
			return nil, status.Error(codes.NotFound, "no intent")
		case r.GetPhase() == statev1.Phase_PHASE_PREPARING:
			r.Phase, r.PreparedDevice = statev1.Phase_PHASE_PREPARED, p.GetPreparedDevice()
		}
	}
	return &statev1.CommitPrepareResponse{}, nil
}

func (m *memState) recordPrepared(in *statev1.RecordPreparedRequest) (*statev1.RecordPreparedResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range in.GetAllocations() {
		r, ok := m.rows[keyString(p.GetKey().GetPool(), p.GetKey().GetDeviceName(), p.GetKey().GetShareId())]
		switch {
		case !ok:
			return nil, status.Error(codes.NotFound, "no intent")
		case r.GetPhase() == statev1.Phase_PHASE_PREPARING:
			r.PreparedDevice = p.GetPreparedDevice()
		}
	}
	return &statev1.RecordPreparedResponse{}, nil
}

func (m *memState) abortPrepare(in *statev1.AbortPrepareRequest) (*statev1.AbortPrepareResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range in.GetKeys() {
		key := keyString(k.GetPool(), k.GetDeviceName(), k.GetShareId())
		if r, ok := m.rows[key]; ok {
			if r.GetPhase() != statev1.Phase_PHASE_PREPARING {
				return nil, status.Errorf(codes.FailedPrecondition, "%s is %s", key, r.GetPhase())
			}
			delete(m.rows, key)
		}
	}
	return &statev1.AbortPrepareResponse{}, nil
}

func (m *memState) restoreAllocations(in *statev1.RestoreAllocationsRequest) (*statev1.RestoreAllocationsResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &statev1.RestoreAllocationsResponse{}
	for _, a := range in.GetAllocations() {
		k := keyString(a.GetPool(), a.GetDeviceName(), a.GetShareId())
		if r, ok := m.rows[k]; ok && r.GetPhase() != statev1.Phase_PHASE_PREPARING {
			continue
		}
		r := proto.CloneOf(a)
		r.Phase = statev1.Phase_PHASE_PREPARED
		m.rows[k] = r
		out.Restored++
	}
	return out, nil
}

func (m *memState) listAllocations(in *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := &statev1.ListAllocationsResponse{}
	for _, k := range slices.Sorted(mapKeys(m.rows)) {
		r := m.rows[k]
		if (in.GetClaimUid() == "" || in.GetClaimUid() == r.GetClaimUid()) &&
			(in.GetPodUid() == "" || in.GetPodUid() == r.GetPodUid()) &&
			(in.GetPhase() == statev1.Phase_PHASE_UNSPECIFIED || in.GetPhase() == r.GetPhase()) {
			out.Allocations = append(out.Allocations, proto.CloneOf(r))
		}
	}
	return out, nil
}

func (m *memState) markFreeFailed(in *statev1.MarkFreeFailedRequest) (*statev1.MarkFreeFailedResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.rows[keyString(in.GetKey().GetPool(), in.GetKey().GetDeviceName(), in.GetKey().GetShareId())]
	if !ok {
		return nil, status.Error(codes.NotFound, "no allocation")
	}
	r.Phase, r.LastError = statev1.Phase_PHASE_FREEING_FAILED, in.GetError()
	r.Attempts++
	return &statev1.MarkFreeFailedResponse{Attempts: r.GetAttempts()}, nil
}

func (m *memState) deleteAllocation(in *statev1.DeleteAllocationRequest) (*statev1.DeleteAllocationResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := keyString(in.GetKey().GetPool(), in.GetKey().GetDeviceName(), in.GetKey().GetShareId())
	if r, ok := m.rows[k]; ok && (in.GetClaimUid() == "" || r.GetClaimUid() == in.GetClaimUid()) {
		delete(m.rows, k)
	}
	return &statev1.DeleteAllocationResponse{}, nil
}

// fakeProvisioner is a ProvisionerClient whose methods call their XxxFunc,
// recording each call; newFakeProvisioner's funcs succeed. Its Setup, as
// the real one, prepares its own inventory's copy of the device the
// request names.
type fakeProvisioner struct {
	rec         *recorder
	SetupFunc   func(*provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error)
	FreeFunc    func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error)
	RestoreFunc func(*provisionerv1.RestoreRequest) (*provisionerv1.RestoreResponse, error)
}

var _ ProvisionerClient = (*fakeProvisioner)(nil)

func newFakeProvisioner(rec *recorder, inventory func() []*devicev1.Device) *fakeProvisioner {
	return &fakeProvisioner{
		rec: rec,
		SetupFunc: func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
			for _, d := range inventory() {
				if d.GetName() == in.GetDeviceName() && d.GetManager() == in.GetManager() {
					return &provisionerv1.SetupResponse{PreparedDevice: preparedOf(d)}, nil
				}
			}
			return nil, status.Errorf(codes.NotFound, "device %s is not in the %s inventory", in.GetDeviceName(), in.GetManager())
		},
		FreeFunc: func(*provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
			return &provisionerv1.FreeResponse{}, nil
		},
		RestoreFunc: func(in *provisionerv1.RestoreRequest) (*provisionerv1.RestoreResponse, error) {
			pd := &devicev1.PreparedDevice{}
			if err := protojson.Unmarshal(in.GetData(), pd); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "data: %v", err)
			}
			return &provisionerv1.RestoreResponse{PreparedDevice: pd}, nil
		},
	}
}

// named is the device a Setup request names: its name and manager.
func named(in *provisionerv1.SetupRequest) *devicev1.Device {
	return &devicev1.Device{Name: in.GetDeviceName(), Manager: in.GetManager()}
}

// preparedOf is what the fake Setup makes of dev.
func preparedOf(dev *devicev1.Device) *devicev1.PreparedDevice {
	return &devicev1.PreparedDevice{
		Device:       proto.CloneOf(dev),
		OriginalLink: &devicev1.LinkSnapshot{Name: dev.GetKernelIfName(), MacAddress: dev.GetMacAddress(), Mtu: 1500},
	}
}

func (f *fakeProvisioner) Setup(_ context.Context, in *provisionerv1.SetupRequest, _ ...grpc.CallOption) (*provisionerv1.SetupResponse, error) {
	f.rec.add("prov.Setup %s", in.GetDeviceName())
	return f.SetupFunc(in)
}

func (f *fakeProvisioner) Free(_ context.Context, in *provisionerv1.FreeRequest, _ ...grpc.CallOption) (*provisionerv1.FreeResponse, error) {
	f.rec.add("prov.Free %s", in.GetPreparedDevice().GetDevice().GetName())
	return f.FreeFunc(in)
}

func (f *fakeProvisioner) Restore(_ context.Context, in *provisionerv1.RestoreRequest, _ ...grpc.CallOption) (*provisionerv1.RestoreResponse, error) {
	f.rec.add("prov.Restore")
	return f.RestoreFunc(in)
}

// fakeClaims is a ClaimWriter recording each call; by default it merges
// the entries into the claim's status as the real writer does.
type fakeClaims struct {
	rec                    *recorder
	UpdateDeviceStatusFunc func(*resourceapi.ResourceClaim, []resourceapi.AllocatedDeviceStatus) error
	mu                     sync.Mutex
	events                 []string
	written                map[string][]resourceapi.AllocatedDeviceStatus // by claim UID, last write
}

var _ ClaimWriter = (*fakeClaims)(nil)

func newFakeClaims(rec *recorder) *fakeClaims {
	f := &fakeClaims{rec: rec, written: map[string][]resourceapi.AllocatedDeviceStatus{}}
	f.UpdateDeviceStatusFunc = func(c *resourceapi.ResourceClaim, devs []resourceapi.AllocatedDeviceStatus) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.written[string(c.UID)] = devs
		return nil
	}
	return f
}

func (f *fakeClaims) UpdateDeviceStatus(_ context.Context, c *resourceapi.ResourceClaim, devs []resourceapi.AllocatedDeviceStatus) error {
	var s []string
	for _, d := range devs {
		s = append(s, d.Pool+"/"+d.Device)
	}
	f.rec.add("claims.UpdateDeviceStatus %s", strings.Join(s, " "))
	return f.UpdateDeviceStatusFunc(c, devs)
}

func (f *fakeClaims) Event(c *resourceapi.ResourceClaim, eventType, reason, message string) {
	f.rec.add("claims.Event %s %s", eventType, reason)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.events = append(f.events, fmt.Sprintf("%s %s %s: %s", c.Name, eventType, reason, message))
}

func (f *fakeClaims) getEvents() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.events)
}

func (f *fakeClaims) getWritten(uid string) []resourceapi.AllocatedDeviceStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.written[uid]
}

// testLogger returns a logger writing to t until the test's cleanup, so a
// straggling goroutine cannot log into a finished test.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.done = true
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// holder is the fake provisioner's memory of the devices it holds set up,
// as the node would have them: a Setup that did its work takes the
// device, a Free gives it back. Setting up a device it holds, or freeing
// one it does not, is a fault (a device double-assigned or double-freed).
type holder struct {
	mu     sync.Mutex
	held   map[string]bool
	faults []string
}

// hold makes r's provisioner take each device its Setup sets up and give
// it back at Free.
func (r *rig) hold() *holder {
	h := &holder{held: map[string]bool{}}
	setup, free := r.prov.SetupFunc, r.prov.FreeFunc
	r.prov.SetupFunc = func(in *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
		resp, err := setup(in)
		if err == nil {
			h.take(in.GetDeviceName())
		}
		return resp, err
	}
	r.prov.FreeFunc = func(in *provisionerv1.FreeRequest) (*provisionerv1.FreeResponse, error) {
		resp, err := free(in)
		if err == nil {
			h.give(in.GetPreparedDevice().GetDevice().GetName())
		}
		return resp, err
	}
	return h
}

func (h *holder) take(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held[name] {
		h.faults = append(h.faults, "set up twice: "+name)
	}
	h.held[name] = true
}

func (h *holder) give(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.held[name] {
		h.faults = append(h.faults, "freed, not held: "+name)
	}
	delete(h.held, name)
}

// check fails t on a fault, or unless the devices held are want.
func (h *holder) check(t *testing.T, want ...string) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, f := range h.faults {
		t.Error(f)
	}
	if got := slices.Sorted(mapKeys(h.held)); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
		t.Errorf("the provisioner holds %q, want %q", got, want)
	}
}
