package health

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

func dev(name string, s devicev1.LinkState) *devicev1.Device {
	return &devicev1.Device{Name: name, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST, KernelIfName: name, LinkState: s}
}

func alloc(pool, device string, phase statev1.Phase) *statev1.Allocation {
	return &statev1.Allocation{Pool: pool, DeviceName: device, ClaimUid: "c-" + device, Phase: phase}
}

func view(devs []*devicev1.Device, pools map[string]string, allocs ...*statev1.Allocation) publish.View {
	v := publish.View{Synced: true, Devices: map[string]*devicev1.Device{}, Pools: pools, Allocations: allocs}
	for _, d := range devs {
		v.Devices[d.GetName()] = d
	}
	return v
}

type h = kubeletplugin.DeviceHealth

const (
	healthy   = kubeletplugin.HealthStatusHealthy
	unhealthy = kubeletplugin.HealthStatusUnhealthy
	unknown   = kubeletplugin.HealthStatusUnknown
)

func TestAssess(t *testing.T) {
	for _, tt := range assessCases {
		t.Run(tt.name, tt.run)
	}
}

// assessCase is one case of TestAssess: the devices' health Assess finds in
// view, with the devices seen before (seen), and the seen it leaves.
type assessCase struct {
	name     string
	seen     map[string]string
	view     publish.View
	want     []h
	wantSeen map[string]string
}

// linkUp and linkDown are the link states the cases give their devices.
const linkUp, linkDown = devicev1.LinkState_LINK_STATE_UP, devicev1.LinkState_LINK_STATE_DOWN

// assessCases are TestAssess's cases.
var assessCases = []assessCase{
	{
		name: "link states",
		view: view([]*devicev1.Device{dev("a", linkUp), dev("b", linkDown), dev("c", devicev1.LinkState_LINK_STATE_ADMIN_DOWN),
			dev("d", devicev1.LinkState_LINK_STATE_UNSPECIFIED)}, map[string]string{"a": "p", "b": "p", "c": "q", "d": "q"}),
		want: []h{
			{PoolName: "n1/p", DeviceName: "a", Health: healthy, Message: MsgUp},
			{PoolName: "n1/p", DeviceName: "b", Health: unhealthy, Message: MsgNoCarrier},
			{PoolName: "n1/q", DeviceName: "c", Health: healthy, Message: MsgAdminDown},
			{PoolName: "n1/q", DeviceName: "d", Health: healthy, Message: MsgNoLink},
		},
		wantSeen: map[string]string{"a": "p", "b": "p", "c": "q", "d": "q"},
	},
	{
		name:     "not published, not allocated: not reported",
		view:     view([]*devicev1.Device{dev("a", linkUp), dev("other", linkDown)}, map[string]string{"a": "p"}),
		want:     []h{{PoolName: "n1/p", DeviceName: "a", Health: healthy, Message: MsgUp}},
		wantSeen: map[string]string{"a": "p"},
	},
	{
		name:     "an allocated device vanished: unhealthy, in its allocation's pool",
		view:     view(nil, map[string]string{}, alloc("p", "a", statev1.Phase_PHASE_PREPARED)),
		want:     []h{{PoolName: "n1/p", DeviceName: "a", Health: unhealthy, Message: MsgVanished}},
		wantSeen: map[string]string{"a": "p"},
	},
	{
		name:     "an attached device gone from the host: unknown",
		view:     view(nil, map[string]string{}, alloc("p", "a", statev1.Phase_PHASE_ATTACHED)),
		want:     []h{{PoolName: "n1/p", DeviceName: "a", Health: unknown, Message: MsgInPod}},
		wantSeen: map[string]string{"a": "p"},
	},
	{
		name:     "an attached device the host still sees: by its link",
		view:     view([]*devicev1.Device{dev("a", linkDown)}, map[string]string{"a": "p"}, alloc("p", "a", statev1.Phase_PHASE_ATTACHED)),
		want:     []h{{PoolName: "n1/p", DeviceName: "a", Health: unhealthy, Message: MsgNoCarrier}},
		wantSeen: map[string]string{"a": "p"},
	},
	{
		name: "a reported device vanished: unhealthy until it is back",
		seen: map[string]string{"a": "p", "b": "p"},
		view: view([]*devicev1.Device{dev("b", linkUp)}, map[string]string{"b": "p"}),
		want: []h{
			{PoolName: "n1/p", DeviceName: "a", Health: unhealthy, Message: MsgVanished},
			{PoolName: "n1/p", DeviceName: "b", Health: healthy, Message: MsgUp},
		},
		wantSeen: map[string]string{"a": "p", "b": "p"},
	},
	{
		name:     "a reported device still present but no longer published: dropped",
		seen:     map[string]string{"a": "p"},
		view:     view([]*devicev1.Device{dev("a", linkUp)}, map[string]string{}),
		want:     []h{},
		wantSeen: map[string]string{},
	},
	{
		name:     "the allocation's pool wins over the published one",
		view:     view([]*devicev1.Device{dev("a", linkUp)}, map[string]string{"a": "q"}, alloc("p", "a", statev1.Phase_PHASE_PREPARED)),
		want:     []h{{PoolName: "n1/p", DeviceName: "a", Health: healthy, Message: MsgUp}},
		wantSeen: map[string]string{"a": "p"},
	},
}

// run assesses the case's view and checks the health and what is seen after.
func (tt assessCase) run(t *testing.T) {
	seen := tt.seen
	if seen == nil {
		seen = map[string]string{}
	}
	got := Assess(tt.view, "n1", seen)
	if diff := cmp.Diff(tt.want, got); diff != "" {
		t.Errorf("health (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(tt.wantSeen, seen); diff != "" {
		t.Errorf("seen (-want +got):\n%s", diff)
	}
}

// fakeSource is a Source whose view a test sets.
type fakeSource struct {
	mu      sync.Mutex
	v       publish.View
	changed chan struct{}
}

func newFakeSource(v publish.View) *fakeSource {
	return &fakeSource{v: v, changed: make(chan struct{})}
}

func (f *fakeSource) View() (publish.View, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.v, f.changed
}

func (f *fakeSource) set(v publish.View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.v = v
	close(f.changed)
	f.changed = make(chan struct{})
}

func next(t *testing.T, reports <-chan kubeletplugin.DeviceHealthReport) []h {
	t.Helper()
	select {
	case r := <-reports:
		return r.Devices
	case <-time.After(10 * time.Second):
		t.Fatal("no health report")
		return nil
	}
}

var ignoreTime = cmpopts.IgnoreFields(h{}, "LastUpdated")

// TestWatchHealthStatus: nothing before the view is synced; then a report,
// a new one only when a device's health changes, and nil when ctx ends.
func TestWatchHealthStatus(t *testing.T) {
	up, down := devicev1.LinkState_LINK_STATE_UP, devicev1.LinkState_LINK_STATE_DOWN
	pools := map[string]string{"a": "p"}
	src := newFakeSource(publish.View{})
	w := New(src, "n1", time.Hour)
	ctx, cancel := context.WithCancel(context.Background())
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- w.WatchHealthStatus(ctx, reports) }()

	src.set(view([]*devicev1.Device{dev("a", up)}, pools))
	got := next(t, reports)
	if diff := cmp.Diff([]h{{PoolName: "n1/p", DeviceName: "a", Health: healthy, Message: MsgUp}}, got, ignoreTime); diff != "" {
		t.Errorf("first report (-want +got):\n%s", diff)
	}
	if got[0].LastUpdated.IsZero() {
		t.Error("the report has no LastUpdated")
	}
	// A change that leaves every device's health as it was sends nothing:
	// the next report is the link going down.
	src.set(view([]*devicev1.Device{dev("a", up), dev("other", down)}, pools))
	src.set(view([]*devicev1.Device{dev("a", down)}, pools))
	if diff := cmp.Diff([]h{{PoolName: "n1/p", DeviceName: "a", Health: unhealthy, Message: MsgNoCarrier}}, next(t, reports), ignoreTime); diff != "" {
		t.Errorf("after the link went down (-want +got):\n%s", diff)
	}
	src.set(view(nil, pools))
	if diff := cmp.Diff([]h{{PoolName: "n1/p", DeviceName: "a", Health: unhealthy, Message: MsgVanished}}, next(t, reports), ignoreTime); diff != "" {
		t.Errorf("after the device vanished (-want +got):\n%s", diff)
	}
	src.set(view([]*devicev1.Device{dev("a", up)}, pools))
	if diff := cmp.Diff([]h{{PoolName: "n1/p", DeviceName: "a", Health: healthy, Message: MsgUp}}, next(t, reports), ignoreTime); diff != "" {
		t.Errorf("after it came back (-want +got):\n%s", diff)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus = %v after cancel, want nil", err)
	}
}

// TestWatchHealthStatus_Resends: an unchanged report is sent again, so the
// kubelet does not let it go stale.
func TestWatchHealthStatus_Resends(t *testing.T) {
	src := newFakeSource(view([]*devicev1.Device{dev("a", devicev1.LinkState_LINK_STATE_UP)}, map[string]string{"a": "p"}))
	w := New(src, "n1", time.Millisecond)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	go func() { _ = w.WatchHealthStatus(ctx, reports) }()
	first, second := next(t, reports), next(t, reports)
	if diff := cmp.Diff(first, second, ignoreTime); diff != "" {
		t.Errorf("resent report differs (-first +second):\n%s", diff)
	}
}
