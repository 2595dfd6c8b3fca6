package publish

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// fakeState serves Watch from a channel of events.
type fakeState struct {
	events chan *statev1.WatchResponse
}

var _ StateWatcher = (*fakeState)(nil)

func (f *fakeState) Watch(ctx context.Context, _ *statev1.WatchRequest, _ ...grpc.CallOption) (grpc.ServerStreamingClient[statev1.WatchResponse], error) {
	return &fakeStream{ctx: ctx, events: f.events}, nil
}

type fakeStream struct {
	grpc.ClientStream
	ctx    context.Context
	events chan *statev1.WatchResponse
}

func (s *fakeStream) Recv() (*statev1.WatchResponse, error) {
	select {
	case ev := <-s.events:
		return ev, nil
	case <-s.ctx.Done():
		return nil, io.EOF
	}
}

type recorder struct {
	mu   sync.Mutex
	seen []*resourceslice.DriverResources
}

func (r *recorder) publish(_ context.Context, ps []Pool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, Resources(ps))
	return nil
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.seen)
}

func (r *recorder) lastShape() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return ""
	}
	return shape(r.seen[len(r.seen)-1])
}

// shape renders resources as "pool:[n n]" per pool, n the devices per slice.
func shape(res *resourceslice.DriverResources) string {
	var parts []string
	for _, name := range sortedKeys(res.Pools) {
		var sizes []string
		for _, s := range res.Pools[name].Slices {
			sizes = append(sizes, fmt.Sprint(len(s.Devices)))
		}
		parts = append(parts, name+":["+strings.Join(sizes, " ")+"]")
	}
	return strings.Join(parts, " ")
}

func sortedKeys(m map[string]resourceslice.Pool) []string {
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	for i := range keys {
		for j := i + 1; j < len(keys); j++ {
			if keys[j] < keys[i] {
				keys[i], keys[j] = keys[j], keys[i]
			}
		}
	}
	return keys
}

func upsert(d *devicev1.Device) *statev1.WatchResponse {
	return &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_UPSERT, Object: &statev1.WatchResponse_Device{Device: d}}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestPublisher(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &fakeState{events: make(chan *statev1.WatchResponse, 512)}
	rec := &recorder{}
	p := NewPublisher(slog.New(slog.DiscardHandler), st, 20*time.Millisecond, rec.publish)
	p.SetPools([]Spec{{Name: "dummies", Filter: Filter{DeviceManagers: []string{"dummy"}}}, {Name: "empty", Filter: Filter{Drivers: []string{"none"}}}})
	go p.Run(ctx)

	// Nothing is published before the first complete view.
	st.events <- &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_RESET}
	st.events <- upsert(&devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY})
	time.Sleep(100 * time.Millisecond)
	if n := rec.count(); n != 0 {
		t.Fatalf("published %d times before SYNCED", n)
	}
	st.events <- &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_SYNCED, Revision: 1}
	waitFor(t, "the first publication", func() bool { return rec.lastShape() == "dummies:[1] empty:[0]" })

	// A burst of 199 more devices: coalesced, and split into slices of 64.
	before := rec.count()
	for i := 1; i < 200; i++ {
		st.events <- upsert(&devicev1.Device{Name: fmt.Sprintf("dummy%d", i), Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY})
	}
	waitFor(t, "the burst", func() bool { return rec.lastShape() == "dummies:[64 64 64 8] empty:[0]" })
	if n := rec.count() - before; n > 20 {
		t.Errorf("199 changes gave %d publications; want them coalesced", n)
	}
	// A config change republishes.
	p.SetPools([]Spec{{Name: "all"}})
	waitFor(t, "the new pools", func() bool { return rec.lastShape() == "all:[64 64 64 8]" })
	// Last is recorded once the publication returned, after the
	// recorder saw it.
	waitFor(t, "Last to show the new pools", func() bool { return Summary(p.Last().Pools) == "all=200" })
}

// TestPublisherSkipsUnchanged: a change that leaves the slices as they
// were (the same pools set again, a device event with the same device, an
// allocation of a discovered device) publishes nothing, and tells Run so
// (which then sets no floor for the next publication); Republish publishes
// the same slices again.
func TestPublisherSkipsUnchanged(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	p := NewPublisher(slog.New(slog.DiscardHandler), &fakeState{}, time.Second, rec.publish)
	p.SetPools([]Spec{{Name: "all"}})
	dev := &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}
	step := func(what string, want bool, evs ...*statev1.WatchResponse) {
		t.Helper()
		for _, ev := range evs {
			if err := p.apply(ev); err != nil {
				t.Fatal(err)
			}
		}
		if got, err := p.publishOnce(ctx); err != nil || got != want {
			t.Errorf("%s: published %v (%v), want %v", what, got, err, want)
		}
	}
	step("the first view", true, upsert(dev), &statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_SYNCED, Revision: 1})
	p.SetPools([]Spec{{Name: "all"}})
	step("the same pools, the same device, an allocation", false,
		upsert(&devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY}),
		&statev1.WatchResponse{Type: statev1.EventType_EVENT_TYPE_UPSERT, Object: &statev1.WatchResponse_Allocation{
			Allocation: &statev1.Allocation{Pool: "all", DeviceName: "dummy0", PreparedDevice: &devicev1.PreparedDevice{Device: dev}}}})
	p.Republish()
	step("Republish", true)
	step("nothing since", false)
	step("a device changed", true, upsert(&devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, Mtu: 9000}))
	if n, got := rec.count(), rec.lastShape(); n != 3 || got != "all:[1]" {
		t.Errorf("%d publications, the last %s; want 3, all:[1]", n, got)
	}
}

// TestWithAllocated: a device with an allocation that discovery no longer
// reports (a host interface in a pod's netns) is published as its
// allocation prepared it, without its stale link state (so untainted), in
// name order; a device still discovered is published as discovered, once
// however many allocations (shares) it has.
func TestWithAllocated(t *testing.T) {
	seen := &devicev1.Device{Name: "b", KernelIfName: "eth-b", LinkState: devicev1.LinkState_LINK_STATE_DOWN}
	alloc := func(name, share string, d *devicev1.Device) *statev1.Allocation {
		return &statev1.Allocation{Pool: "net", DeviceName: name, ShareId: share, PreparedDevice: &devicev1.PreparedDevice{Device: d}}
	}
	inPod := &devicev1.Device{Name: "a", KernelIfName: "data0", LinkState: devicev1.LinkState_LINK_STATE_UP}
	got := withAllocated([]*devicev1.Device{seen}, []*statev1.Allocation{
		alloc("a", "", inPod),
		alloc("b", "1", &devicev1.Device{Name: "b", KernelIfName: "stale"}), alloc("b", "2", &devicev1.Device{Name: "b"}),
		alloc("c", "", nil), // nothing prepared yet: nothing to publish
	})
	var names []string
	for _, d := range got {
		names = append(names, fmt.Sprintf("%s/%s/%v", d.GetName(), d.GetKernelIfName(), d.GetLinkState()))
	}
	want := []string{"a/data0/LINK_STATE_UNSPECIFIED", "b/eth-b/LINK_STATE_DOWN"}
	if diff := cmp.Diff(want, names); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if inPod.GetLinkState() != devicev1.LinkState_LINK_STATE_UP {
		t.Errorf("the allocation's prepared device was changed: %v", inPod)
	}
}
