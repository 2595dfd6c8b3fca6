package publish

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	clientfeatures "k8s.io/client-go/features"
	clientfeaturestesting "k8s.io/client-go/features/testing"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// TestSlicePools: the pools are published under <node>/<pool>, so two
// nodes with the same NodeConfig publish different pools.
func TestSlicePools(t *testing.T) {
	res := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{
		"net":   {Slices: []resourceslice.Slice{{Devices: []resourceapi.Device{{Name: "data0"}}}}},
		"empty": {Slices: []resourceslice.Slice{{}}},
	}}
	a, b := slicePools("node-a", res), slicePools("node-b", res)
	if len(a.Pools) != 2 || len(a.Pools["node-a/net"].Slices[0].Devices) != 1 || len(a.Pools["node-a/empty"].Slices) != 1 {
		t.Errorf("node-a: %v", a.Pools)
	}
	if _, ok := b.Pools["node-b/net"]; !ok {
		t.Errorf("node-b: %v", b.Pools)
	}
	if _, ok := res.Pools["net"]; !ok || len(res.Pools) != 2 {
		t.Errorf("the input changed: %v", res.Pools)
	}
}

// have is a slice as the informer keeps it (skinny) of pool "p" at gen,
// index i, written with the spec of devices (count slices in the pool).
func have(t *testing.T, name string, gen int64, i, count int, devices ...string) *resourceapi.ResourceSlice {
	t.Helper()
	spec := resourceapi.ResourceSliceSpec{Pool: resourceapi.ResourcePool{Name: "p", ResourceSliceCount: int64(count)}, Devices: devs(devices...)}
	h, err := specHash(&spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Pool.Generation = gen
	s := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: name, ResourceVersion: "1",
		Annotations: map[string]string{annotationIndex: strconv.Itoa(i), annotationHash: h}}, Spec: spec}
	out, err := skinny(s)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*resourceapi.ResourceSlice)
}

func devs(names ...string) []resourceapi.Device {
	var out []resourceapi.Device
	for _, n := range names {
		out = append(out, resourceapi.Device{Name: n})
	}
	return out
}

func want(sl ...[]resourceapi.Device) []resourceslice.Slice {
	var out []resourceslice.Slice
	for _, d := range sl {
		out = append(out, resourceslice.Slice{Devices: d})
	}
	return out
}

// TestPlanPool: what a sync writes for one pool, and under which
// generation: an update of at most one slice keeps it, anything else
// writes every slice under the next one, the obsolete ones deleted.
func TestPlanPool(t *testing.T) {
	type write = plannedWrite
	for _, c := range []struct {
		name    string
		want    []resourceslice.Slice
		have    []*resourceapi.ResourceSlice
		writes  []write
		deletes []string
	}{
		{name: "nothing yet: created under generation 1", want: want(devs("a"), devs("b")),
			writes: []write{{"", 0, 1}, {"", 1, 1}}},
		{name: "as wanted: nothing", want: want(devs("a"), devs("b")),
			have: []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 2, "a"), have(t, "s1", 3, 1, 2, "b")}},
		{name: "one slice changed: updated, same generation", want: want(devs("a"), devs("b", "c")),
			have:   []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 2, "a"), have(t, "s1", 3, 1, 2, "b")},
			writes: []write{{"s1", 1, 3}}},
		{name: "two slices changed: every slice, next generation", want: want(devs("x"), devs("y")),
			have:   []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 2, "a"), have(t, "s1", 3, 1, 2, "b")},
			writes: []write{{"s0", 0, 4}, {"s1", 1, 4}}},
		{name: "a slice more: every slice, next generation", want: want(devs("a"), devs("b"), devs("c")),
			have:   []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 2, "a"), have(t, "s1", 3, 1, 2, "b")},
			writes: []write{{"s0", 0, 4}, {"s1", 1, 4}, {"", 2, 4}}},
		{name: "a slice less: the extra deleted, the rest next generation", want: want(devs("a")),
			have:    []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 2, "a"), have(t, "s1", 3, 1, 2, "b")},
			writes:  []write{{"s0", 0, 4}},
			deletes: []string{"s1"}},
		{name: "an older generation and a duplicate: deleted", want: want(devs("a")),
			have:    []*resourceapi.ResourceSlice{have(t, "old", 2, 0, 1, "a"), have(t, "s0", 3, 0, 1, "a"), have(t, "dup", 3, 0, 1, "a")},
			writes:  []write{{"s0", 0, 4}},
			deletes: []string{"old", "dup"}},
		{name: "pool gone: every slice deleted", have: []*resourceapi.ResourceSlice{have(t, "s0", 3, 0, 1, "a")},
			deletes: []string{"s0"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, err := planPool("p", c.want, c.have, map[string]written{})
			if err != nil {
				t.Fatal(err)
			}
			writes, deletes := planSummary(plan)
			if diff := cmp.Diff(c.writes, writes, cmp.AllowUnexported(write{})); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.deletes, deletes); diff != "" {
				t.Errorf("deletes (-want +got):\n%s", diff)
			}
		})
	}
}

// plannedWrite is a slice write of a plan, as TestPlanPool states it.
type plannedWrite struct {
	cur   string // "" for a create
	index int
	gen   int64
}

// planSummary is plan's writes, and the names of the slices it deletes.
func planSummary(plan poolPlan) ([]plannedWrite, []string) {
	var writes []plannedWrite
	for _, w := range plan.writes {
		cur := ""
		if w.cur != nil {
			cur = w.cur.Name
		}
		writes = append(writes, plannedWrite{cur, w.index, w.spec.Pool.Generation})
	}
	var deletes []string
	for _, s := range plan.deletes {
		deletes = append(deletes, s.Name)
	}
	return writes, deletes
}

// TestPlanPoolChangedByOthers: a slice someone else changed since dra wrote
// it is written again; one dra does not know (it restarted) is taken as
// it is when its annotation matches.
func TestPlanPoolChangedByOthers(t *testing.T) {
	s := have(t, "s0", 1, 0, 1, "a")
	ours := map[string]written{}
	if plan, _ := planPool("p", want(devs("a")), []*resourceapi.ResourceSlice{s}, ours); len(plan.writes) != 0 {
		t.Fatalf("a slice dra did not know was written: %+v", plan.writes)
	}
	if _, ok := ours["s0"]; !ok {
		t.Fatal("the slice was not recorded")
	}
	edited := have(t, "s0", 1, 0, 1, "a", "extra") // someone's edit; the annotations stay
	edited.Annotations[annotationHash] = s.Annotations[annotationHash]
	edited.ResourceVersion = "2"
	plan, _ := planPool("p", want(devs("a")), []*resourceapi.ResourceSlice{edited}, ours)
	if len(plan.writes) != 1 || plan.writes[0].cur.Name != "s0" || plan.writes[0].spec.Pool.Generation != 1 {
		t.Errorf("the edited slice: %+v, want it written again under generation 1", plan.writes)
	}
}

// TestKeepTaintTimes: a taint that stays keeps the TimeAdded the apiserver
// gave it, through the informer's skinny copy; a new taint gets none (the
// apiserver's); the desired devices are not changed.
func TestKeepTaintTimes(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	taint := func(key string, when *metav1.Time) []resourceapi.DeviceTaint {
		return []resourceapi.DeviceTaint{{Key: key, Value: "link-down", Effect: resourceapi.DeviceTaintEffectNoExecute, TimeAdded: when}}
	}
	server := &resourceapi.ResourceSlice{Spec: resourceapi.ResourceSliceSpec{Devices: []resourceapi.Device{
		{Name: "a", Taints: taint("k", &at)}, {Name: "b"}}}}
	o, err := skinny(server)
	if err != nil {
		t.Fatal(err)
	}
	cur := o.(*resourceapi.ResourceSlice)
	if len(cur.Spec.Devices) != 1 || cur.Spec.Devices[0].Name != "a" {
		t.Fatalf("skinny kept %v, want device a's taints only", cur.Spec.Devices)
	}
	desired := []resourceapi.Device{{Name: "a", Taints: taint("k", nil)}, {Name: "b", Taints: taint("k", nil)}, {Name: "c"}}
	got := keepTaintTimes(desired, cur)
	if tt := got[0].Taints[0].TimeAdded; tt == nil || !tt.Equal(&at) {
		t.Errorf("device a's taint time: %v, want %v", tt, at)
	}
	if got[1].Taints[0].TimeAdded != nil {
		t.Errorf("device b's new taint got a time: %v", got[1].Taints[0].TimeAdded)
	}
	if desired[0].Taints[0].TimeAdded != nil {
		t.Error("the desired devices were changed")
	}
}

// A write refused as a conflict while the informer is behind (here its
// watch never delivers) reads the slice back: the retry writes over the
// slice as it is, instead of conflicting again until the informer
// catches up.
func TestSliceWriter_ConflictReadsBack(t *testing.T) {
	f := newFakeSlices(t)
	c, gvr, mu := f.c, f.gvr, &f.mu
	ctx := t.Context()
	// The informer's watch does not show someone else's write.
	c.PrependWatchReactor("resourceslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		real, err := c.Tracker().Watch(gvr, "")
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(real, func(e watch.Event) (watch.Event, bool) {
			s, ok := e.Object.(*resourceapi.ResourceSlice)
			return e, !ok || len(s.Spec.Devices) == 0 || s.Spec.Devices[0].Name != "theirs"
		}), nil
	})
	conflicts := 0
	// An update of a stale resource version is a conflict, as at the
	// apiserver.
	c.PrependReactor("update", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		s := a.(k8stesting.UpdateAction).GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		o, err := c.Tracker().Get(gvr, "", s.Name)
		if err != nil {
			return true, nil, err
		}
		if o.(*resourceapi.ResourceSlice).ResourceVersion != s.ResourceVersion {
			conflicts++
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), s.Name, errors.New("stale"))
		}
		f.rv++
		s.ResourceVersion = strconv.Itoa(f.rv)
		return true, s, c.Tracker().Update(gvr, s, "")
	})
	w := NewSliceWriter("d.example", "n", c, func(context.Context, error, string) {})
	defer w.Stop()
	pool := func(dev string) []Pool {
		return []Pool{{Name: "p", Devices: []*devicev1.Device{{Name: dev, Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST}}}}
	}
	published := func(dev string) bool {
		list, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		return err == nil && len(list.Items) == 1 && len(list.Items[0].Spec.Devices) == 1 && list.Items[0].Spec.Devices[0].Name == dev
	}
	if err := w.Publish(ctx, pool("a")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first slice", func() bool { return published("a") })

	// Someone else writes the slice; the informer does not show it (nor,
	// as when its watch lags, dra's next write: its events come in
	// order).
	list, _ := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	other := list.Items[0].DeepCopy()
	other.Spec.Devices[0].Name = "theirs"
	if _, err := c.ResourceV1().ResourceSlices().Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.Publish(ctx, pool("b")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the slice rewritten", func() bool { return published("b") })
	mu.Lock()
	defer mu.Unlock()
	if conflicts != 1 {
		t.Errorf("%d conflicts, want 1: the retry did not plan from the slice read back", conflicts)
	}
}

// waitUntil polls cond for a few seconds, failing t with what it waited
// for.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A slice dra created stands for the informer's copy for as long as the
// informer has not passed the creation's resource version, however long
// its watch lags: syncs meanwhile create nothing a second time. Once the
// informer has passed it (here a bookmark) without showing the slice
// (someone deleted it), the writer creates it again.
func TestSliceWriter_LaggingInformerCreatesOnce(t *testing.T) {
	f := newFakeSlices(t)
	c, gvr, ctx := f.c, f.gvr, t.Context()
	f.rv = 1
	c.PrependReactor("list", "resourceslices", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return true, &resourceapi.ResourceSliceList{ListMeta: metav1.ListMeta{ResourceVersion: strconv.Itoa(f.rv)}}, nil
	})
	// The informer's watch shows nothing of the writes: it lags. Events
	// sent on events reach it.
	events := make(chan watch.Event, 1)
	c.PrependWatchReactor("resourceslices", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewProxyWatcher(events), nil
	})
	w := NewSliceWriter("d.example", "n", c, func(context.Context, error, string) {})
	w.ttl = 20 * time.Millisecond
	defer w.Stop()
	pool := []Pool{{Name: "p", Devices: []*devicev1.Device{{Name: "a", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST}}}}
	count := func() int {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.creates
	}
	if err := w.Publish(ctx, pool); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first slice", func() bool { return count() == 1 })
	for range 10 { // syncs well past the ttl, the informer still behind
		time.Sleep(2 * w.ttl)
		if err := w.Publish(ctx, pool); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * w.ttl)
	if n := count(); n != 1 {
		t.Fatalf("%d creates while the informer lagged, want 1", n)
	}

	// Someone deletes the slice; the informer passes the creation without
	// showing it.
	list, err := c.Tracker().List(gvr, resourceapi.SchemeGroupVersion.WithKind("ResourceSlice"), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range list.(*resourceapi.ResourceSliceList).Items {
		if err := c.Tracker().Delete(gvr, "", s.Name); err != nil {
			t.Fatal(err)
		}
	}
	f.mu.Lock()
	f.rv++
	events <- watch.Event{Type: watch.Bookmark, Object: &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{ResourceVersion: strconv.Itoa(f.rv)}}}
	f.mu.Unlock()
	waitUntil(t, "the slice created again", func() bool { return count() == 2 })
}

// fakeSlices is a fake clientset with node n, whose ResourceSlice creates
// get names and resource versions from a counter, as at the apiserver.
// The informers of its users list first (no watch-list): its watch sends
// no initial events.
type fakeSlices struct {
	c   *fake.Clientset
	gvr schema.GroupVersionResource

	mu      sync.Mutex
	rv      int // the last resource version given
	creates int
}

func newFakeSlices(t *testing.T) *fakeSlices {
	clientfeaturestesting.SetFeatureDuringTest(t, clientfeatures.WatchListClient, false)
	f := &fakeSlices{c: fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", UID: "n-uid"}}),
		gvr: resourceapi.SchemeGroupVersion.WithResource("resourceslices")}
	f.c.PrependReactor("create", "resourceslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		s := a.(k8stesting.CreateAction).GetObject().(*resourceapi.ResourceSlice).DeepCopy()
		f.rv++
		f.creates++
		s.Name, s.ResourceVersion = s.GenerateName+strconv.Itoa(f.rv), strconv.Itoa(f.rv)
		return true, s, f.c.Tracker().Create(f.gvr, s, "")
	})
	return f
}
