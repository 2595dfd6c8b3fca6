package scale

import (
	"context"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// driver is netdra's default DRA driver name.
const driver = v1alpha1.DefaultDriverName

// tracker follows every NodeConfig and every ResourceSlice of netdra (two
// watches of the harness's own, open before the baseline is sampled) and
// records, per node, when its NodeConfig first showed the wanted pools
// applied and when its slices first held them.
type tracker struct {
	devices int // per node

	mu        sync.Mutex
	want      []string // pool names, sorted
	since     time.Time
	written   map[string]time.Time // the NodeConfig's spec has the pools
	applied   map[string]time.Time
	published map[string]time.Time
	ncs       map[string]*v1alpha1.NodeConfig
	slices    map[string]map[string]*resourceapi.ResourceSlice // node -> slice name
}

func newTracker(ctx context.Context, c kubernetes.Interface, dc dynamic.Interface, devices int) (*tracker, error) {
	t := &tracker{devices: devices, ncs: map[string]*v1alpha1.NodeConfig{},
		slices: map[string]map[string]*resourceapi.ResourceSlice{}}
	dyn := dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	ncInf := dyn.ForResource(v1alpha1.GroupVersion.WithResource("nodeconfigs")).Informer()
	if _, err := ncInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: t.nodeConfig, UpdateFunc: func(_, o any) { t.nodeConfig(o) },
	}); err != nil {
		return nil, err
	}
	typed := informers.NewSharedInformerFactory(c, 0)
	sInf := typed.Resource().V1().ResourceSlices().Informer()
	if _, err := sInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: t.slice, UpdateFunc: func(_, o any) { t.slice(o) }, DeleteFunc: t.sliceGone,
	}); err != nil {
		return nil, err
	}
	dyn.Start(ctx.Done())
	typed.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), ncInf.HasSynced, sInf.HasSynced)
	return t, nil
}

// expect starts a new round: nodes count from now until their NodeConfig
// applies, and their slices publish, exactly the pools named.
func (t *tracker) expect(pools ...string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.want = slices.Sorted(slices.Values(pools))
	t.since = time.Now()
	t.written, t.applied, t.published = map[string]time.Time{}, map[string]time.Time{}, map[string]time.Time{}
	for node := range t.ncs {
		t.checkLocked(node)
	}
	for node := range t.slices {
		t.checkLocked(node)
	}
}

// writtenTimes are the times since the round began at which each node's
// NodeConfig got the round's pools (the operator's writes).
func (t *tracker) writtenTimes() map[string]time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]time.Duration{}
	for n, at := range t.written {
		out[n] = at.Sub(t.since)
	}
	return out
}

// nodeDone says whether node's NodeConfig applied the round's pools and
// its slices published them.
func (t *tracker) nodeDone(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, a := t.applied[node]
	_, p := t.published[node]
	return a && p
}

// waitNode waits until nodeDone(node), ctx's end or timeout, whichever
// comes first; it returns false unless node is done.
func (t *tracker) waitNode(ctx context.Context, node string, timeout time.Duration) bool {
	return wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		return t.nodeDone(node), nil
	}) == nil
}

// done returns the nodes applied and published, and each node's
// times since the round began.
func (t *tracker) done() (applied, published map[string]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	applied, published = map[string]time.Duration{}, map[string]time.Duration{}
	for n, at := range t.applied {
		applied[n] = at.Sub(t.since)
	}
	for n, at := range t.published {
		published[n] = at.Sub(t.since)
	}
	return applied, published
}

func (t *tracker) nodeConfig(o any) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return
	}
	nc := &v1alpha1.NodeConfig{}
	if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nc) != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.ncs[nc.Name] = nc
	t.checkLocked(nc.Name)
}

func (t *tracker) slice(o any) {
	s, ok := o.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.Driver != driver || s.Spec.NodeName == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	node := *s.Spec.NodeName
	if t.slices[node] == nil {
		t.slices[node] = map[string]*resourceapi.ResourceSlice{}
	}
	t.slices[node][s.Name] = s
	t.checkLocked(node)
}

func (t *tracker) sliceGone(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	s, ok := o.(*resourceapi.ResourceSlice)
	if !ok || s.Spec.NodeName == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.slices[*s.Spec.NodeName], s.Name)
	t.checkLocked(*s.Spec.NodeName)
}

// checkLocked records node's times once it reached the round's pools.
func (t *tracker) checkLocked(node string) {
	if t.want == nil {
		return
	}
	now := time.Now()
	if _, ok := t.applied[node]; !ok {
		if nc := t.ncs[node]; nc != nil {
			var names []string
			for _, p := range nc.Spec.Pools {
				names = append(names, p.Name)
			}
			c := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionApplied)
			same := slices.Equal(slices.Sorted(slices.Values(names)), t.want)
			if _, ok := t.written[node]; !ok && same {
				t.written[node] = now
			}
			if same && c != nil && c.Status == "True" && c.ObservedGeneration == nc.Generation {
				t.applied[node] = now
			}
		}
	}
	if _, ok := t.published[node]; !ok {
		devices := 0
		pools := map[string]bool{}
		for _, s := range t.slices[node] {
			pool, ok := slicepool.PoolOf(node, s.Spec.Pool.Name)
			if !ok || !slices.Contains(t.want, pool) {
				return // a pool not (or no longer) wanted is still published
			}
			pools[pool] = true
			devices += len(s.Spec.Devices)
		}
		if devices == t.devices && len(pools) == len(t.want) {
			t.published[node] = now
		}
	}
}
