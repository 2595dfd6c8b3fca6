package plugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// world is a fake state service and provisioner sharing one call log: the
// state holds allocations; the provisioner tracks where each device is.
type world struct {
	mu     sync.Mutex
	calls  []string
	allocs map[string]*statev1.Allocation // device name -> row
	where  map[string]string              // device name -> netns, "" = host
	// failAttach makes Attach of that device fail; missing makes its link
	// absent until Setup.
	failAttach map[string]error
	missing    map[string]bool
	// setups are the Setup requests, by the device name they name.
	setups map[string]*provisionerv1.SetupRequest
	// unavailable makes the next n calls to the provisioner fail with
	// Unavailable, as when it dies during the call.
	unavailable int
	// together, when set, makes each provisioner Attach and Detach wait
	// until as many as it counts are in flight.
	together *sync.WaitGroup
	// hold, when set, makes each provisioner Attach and Detach wait
	// until it is closed.
	hold chan struct{}
	// moving counts the provisioner's Attach and Detach calls in
	// flight, peak the most at once; pause makes each last that long.
	moving, peak int
	pause        time.Duration
}

// moveStarts counts a move in and returns its end, after w.pause.
func (w *world) moveStarts() (ends func()) {
	w.mu.Lock()
	w.moving++
	w.peak = max(w.peak, w.moving)
	pause := w.pause
	w.mu.Unlock()
	return func() {
		time.Sleep(pause)
		w.mu.Lock()
		w.moving--
		w.mu.Unlock()
	}
}

// meet waits, when together is set, until its count of moves are in
// flight.
func (w *world) meet() {
	w.mu.Lock()
	b, hold := w.together, w.hold
	w.mu.Unlock()
	if b != nil {
		b.Done()
		b.Wait()
	}
	if hold != nil {
		<-hold
	}
}

func newWorld(allocs ...*statev1.Allocation) *world {
	w := &world{allocs: map[string]*statev1.Allocation{}, where: map[string]string{}, failAttach: map[string]error{}, missing: map[string]bool{},
		setups: map[string]*provisionerv1.SetupRequest{}}
	for _, a := range allocs {
		w.allocs[a.GetDeviceName()] = a
	}
	return w
}

func alloc(dev, pod string, phase statev1.Phase) *statev1.Allocation {
	return &statev1.Allocation{Pool: "p", DeviceName: dev, ClaimUid: "claim-" + pod, PodUid: pod, Phase: phase,
		Config:         &devicev1.DeviceConfig{PodIfName: "net-" + dev},
		PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: dev, KernelIfName: dev}, OriginalLink: &devicev1.LinkSnapshot{Name: dev}}}
}

func (w *world) log(format string, args ...any) {
	w.calls = append(w.calls, fmt.Sprintf(format, args...))
}

func (w *world) takeCalls() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	c := w.calls
	w.calls = nil
	return c
}

// fakeState is the state service of a world.
type fakeState struct{ w *world }

var _ StateClient = fakeState{}

func (f fakeState) ListAllocations(_ context.Context, r *statev1.ListAllocationsRequest, _ ...grpc.CallOption) (*statev1.ListAllocationsResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	out := &statev1.ListAllocationsResponse{}
	for _, name := range sortedKeys(f.w.allocs) {
		a := f.w.allocs[name]
		if (r.GetPodUid() == "" || r.GetPodUid() == a.GetPodUid()) && (r.GetPhase() == 0 || r.GetPhase() == a.GetPhase()) &&
			(r.GetDeviceName() == "" || r.GetDeviceName() == a.GetDeviceName()) && (r.GetClaimUid() == "" || r.GetClaimUid() == a.GetClaimUid()) {
			out.Allocations = append(out.Allocations, proto.CloneOf(a))
		}
	}
	return out, nil
}

func (f fakeState) MarkAttached(_ context.Context, r *statev1.MarkAttachedRequest, _ ...grpc.CallOption) (*statev1.MarkAttachedResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.log("state.MarkAttached %s %s", r.GetKey().GetDeviceName(), r.GetNetnsPath())
	a := f.w.allocs[r.GetKey().GetDeviceName()]
	a.Phase, a.NetnsPath, a.PreparedDevice = statev1.Phase_PHASE_ATTACHED, r.GetNetnsPath(), r.GetPreparedDevice()
	a.AttachError, a.AttachFailures = "", 0
	return &statev1.MarkAttachedResponse{}, nil
}

func (f fakeState) MarkAttachFailed(_ context.Context, r *statev1.MarkAttachFailedRequest, _ ...grpc.CallOption) (*statev1.MarkAttachFailedResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.log("state.MarkAttachFailed %s %q", r.GetKey().GetDeviceName(), r.GetError())
	a := f.w.allocs[r.GetKey().GetDeviceName()]
	a.AttachError = r.GetError()
	a.AttachFailures++
	return &statev1.MarkAttachFailedResponse{AttachFailures: a.GetAttachFailures()}, nil
}

func (f fakeState) MarkDetached(_ context.Context, r *statev1.MarkDetachedRequest, _ ...grpc.CallOption) (*statev1.MarkDetachedResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	f.w.log("state.MarkDetached %s", r.GetKey().GetDeviceName())
	a := f.w.allocs[r.GetKey().GetDeviceName()]
	a.Phase, a.NetnsPath = statev1.Phase_PHASE_PREPARED, ""
	return &statev1.MarkDetachedResponse{}, nil
}

// fakeProvisioner is the provisioner of a world.
type fakeProvisioner struct{ w *world }

var _ ProvisionerClient = fakeProvisioner{}

func (f fakeProvisioner) Attach(_ context.Context, r *provisionerv1.AttachRequest, _ ...grpc.CallOption) (*provisionerv1.AttachResponse, error) {
	f.w.meet()
	f.w.moveStarts()()
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	dev := r.GetPreparedDevice().GetDevice().GetName()
	f.w.log("provisioner.Attach %s %s %s", dev, r.GetNetnsPath(), r.GetConfig().GetPodIfName())
	if f.w.unavailable > 0 {
		f.w.unavailable--
		return nil, status.Error(codes.Unavailable, "error reading from server: connection reset by peer")
	}
	if err := f.w.failAttach[dev]; err != nil {
		return nil, err
	}
	if f.w.missing[dev] {
		return nil, status.Errorf(codes.NotFound, "link %s not found", dev)
	}
	f.w.where[dev] = r.GetNetnsPath()
	return &provisionerv1.AttachResponse{PreparedDevice: r.GetPreparedDevice()}, nil
}

func (f fakeProvisioner) Detach(_ context.Context, r *provisionerv1.DetachRequest, _ ...grpc.CallOption) (*provisionerv1.DetachResponse, error) {
	f.w.meet()
	f.w.moveStarts()()
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	dev := r.GetPreparedDevice().GetDevice().GetName()
	f.w.log("provisioner.Detach %s %s", dev, r.GetNetnsPath())
	if f.w.unavailable > 0 {
		f.w.unavailable--
		return nil, status.Error(codes.Unavailable, "error reading from server: connection reset by peer")
	}
	f.w.where[dev] = ""
	return &provisionerv1.DetachResponse{}, nil
}

func (f fakeProvisioner) Setup(_ context.Context, r *provisionerv1.SetupRequest, _ ...grpc.CallOption) (*provisionerv1.SetupResponse, error) {
	f.w.mu.Lock()
	defer f.w.mu.Unlock()
	dev := r.GetDeviceName()
	f.w.log("provisioner.Setup %s", dev)
	f.w.setups[dev] = r
	delete(f.w.missing, dev)
	return &provisionerv1.SetupResponse{PreparedDevice: &devicev1.PreparedDevice{Device: &devicev1.Device{Name: dev, Manager: r.GetManager(), KernelIfName: dev},
		OriginalLink: &devicev1.LinkSnapshot{Name: dev, Mtu: 9000}}}, nil
}

func sortedKeys(m map[string]*statev1.Allocation) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if strings.Compare(keys[j], keys[i]) < 0 {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

// perDevice groups calls by the device they name (their second word), in
// their order: a pod's devices are attached and detached at once, so only
// each device's own calls have an order.
func perDevice(calls []string) map[string][]string {
	out := map[string][]string{}
	for _, c := range calls {
		f := strings.Fields(c)
		if len(f) > 1 {
			out[f[1]] = append(out[f[1]], c)
		}
	}
	return out
}
