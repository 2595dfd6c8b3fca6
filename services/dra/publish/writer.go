package publish

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/fanout"
)

// SliceSyncDelay is how soon dra puts back a ResourceSlice that someone
// else changed or deleted. The kubelet deletes every slice of its node when
// it starts, and until they are back new pods with claims cannot be
// scheduled, so the whole delay is on their path: it is short, long enough
// only to coalesce a burst of deletions (the kubelet's is one
// DeleteCollection, whose events come close together), unlike the
// resourceslice controller's default.
const SliceSyncDelay = 50 * time.Millisecond

// What dra writes on each of its slices, and what only its informer's
// copies carry.
const (
	// annotationIndex is the slice's place among its pool's slices.
	annotationIndex = "netdra.io/slice-index"
	// annotationHash is the hash of the spec dra wrote, without the pool
	// generation (specHash).
	annotationHash = "netdra.io/slice-hash"
	// localSpecHash is set by the informer (skinny) on its copies only:
	// the hash of the spec as the apiserver has it, to tell a slice dra
	// wrote from one someone else changed since.
	localSpecHash = "netdra.io/local-spec-hash"
)

// writeParallelism is how many slice writes dra has in flight at once.
const writeParallelism = 8

// SliceWriter publishes one driver's ResourceSlices for the node.
//
// It is netdra's own, not the resourceslice controller that the kubelet
// plugin helper offers, for memory: that controller keeps a deep copy of
// every published device, an informer cache of every slice as the
// apiserver returns it, and for a minute each slice it wrote (its mutation
// cache), which on a node with many VFs is most of dra's heap. This one
// keeps the pools it was given (the publisher's devices, shared) and, of
// each slice, its name, place, resource version and hashes: it builds the
// slices' devices again at each sync, and its informer drops the devices
// of what it receives. It also writes the slices of a sync in parallel
// (writeParallelism), so a pool of many slices publishes sooner.
//
// A pool's slices share a generation; as the resourceslice controller
// does, an update of at most one existing slice keeps it, anything else
// (slices added or removed, or more than one changed) writes every slice of
// the pool under the next one, removing the obsolete ones first, so that
// the scheduler never takes a mix of old and new slices for the pool.
type SliceWriter struct {
	driver, node string
	kube         kubernetes.Interface
	onError      func(ctx context.Context, err error, msg string)

	mu      sync.Mutex
	desired []Pool // nil before the first Publish
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
	kick    chan struct{}
	inf     cache.SharedIndexInformer
	owner   types.UID
	// ours is what dra wrote last of each slice it knows, by name.
	ours map[string]written
	// latest are the slices as dra wrote them, until its informer shows
	// them (actual); deleted are those it deleted that it may still show.
	latest  map[string]mine
	deleted map[string]bool
	ttl     time.Duration // latestTTL; shorter in tests
	recheck *time.Timer   // a sync when a slice in latest may expire
}

// NewSliceWriter returns the writer of driver's slices for node; it
// starts at its first Publish. onError is told of each failed write, which
// the writer retries.
func NewSliceWriter(driver, node string, kube kubernetes.Interface, onError func(ctx context.Context, err error, msg string)) *SliceWriter {
	return &SliceWriter{driver: driver, node: node, kube: kube, onError: onError, ttl: latestTTL}
}

// mine is a slice as dra wrote it, and when.
type mine struct {
	s  *resourceapi.ResourceSlice
	at time.Time
}

// latestTTL is how long a slice dra wrote stands for the informer's copy
// at least. After it, the slice stands until the informer has passed the
// write's resource version (its watch delivered an event or bookmark at or
// after it): a slice deleted by someone else before dra recorded its own
// write (a race of milliseconds) would otherwise stand for ever, and one
// dropped while the informer still lags would be created a second time
// and then deleted, writes that add to what makes the informer lag. A
// sync follows each expiry.
const latestTTL = 10 * time.Second

// written is one slice as dra last wrote it.
type written struct {
	resourceVersion string
	specHash        string // of the spec the apiserver returned
}

// Publish replaces the published slices with ps (netdra's pools; they
// are published under their slice pool names, slicepool.SlicePool). The
// writes happen in the background and are retried until they succeed;
// failures are reported to onError. ps is kept, not copied: the caller
// must not change it.
func (p *SliceWriter) Publish(ctx context.Context, ps []Pool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.desired = ps
	if !p.started {
		p.start(context.WithoutCancel(ctx))
	}
	p.poke()
	return nil
}

// start starts the informer and the sync loop (under p.mu).
func (p *SliceWriter) start(ctx context.Context) {
	ctx, p.cancel = context.WithCancel(ctx)
	p.started, p.done, p.kick = true, make(chan struct{}), make(chan struct{}, 1)
	p.ours, p.latest, p.deleted = map[string]written{}, map[string]mine{}, map[string]bool{}
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.nodeName", p.node), fields.OneTermEqualSelector("spec.driver", p.driver)).String()
	rs := p.kube.ResourceV1().ResourceSlices()
	p.inf = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return rs.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return rs.Watch(ctx, o)
		},
	}, &resourceapi.ResourceSlice{}, 0, cache.Indexers{})
	_ = p.inf.SetTransform(skinny)
	_, _ = p.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    p.changed,
		UpdateFunc: func(_, o any) { p.changed(o) },
		DeleteFunc: p.gone,
	})
	go p.inf.RunWithContext(ctx)
	go p.run(ctx)
}

// changed is the informer's news of a slice: it is shown now (no longer
// latest's to stand for), and a sync is scheduled unless it is the slice as
// dra last wrote it.
func (p *SliceWriter) changed(o any) {
	s, ok := o.(*resourceapi.ResourceSlice)
	if !ok {
		return
	}
	p.mu.Lock()
	if m, ok := p.latest[s.Name]; ok && !newer(m.s.ResourceVersion, s.ResourceVersion) {
		delete(p.latest, s.Name)
	}
	w, known := p.ours[s.Name]
	p.mu.Unlock()
	if !known || w.resourceVersion != s.ResourceVersion {
		time.AfterFunc(SliceSyncDelay, p.poke)
	}
}

// gone is the informer's news of a deleted slice: a sync is scheduled (the
// kubelet deletes the node's slices when it starts).
func (p *SliceWriter) gone(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	if s, ok := o.(*resourceapi.ResourceSlice); ok {
		p.mu.Lock()
		delete(p.latest, s.Name)
		delete(p.ours, s.Name)
		p.mu.Unlock()
	}
	time.AfterFunc(SliceSyncDelay, p.poke)
}

func (p *SliceWriter) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run syncs at each kick until ctx ends, retrying a failed sync with a
// backoff (100ms doubling up to 30s, from the first wait again after a
// sync that succeeds).
func (p *SliceWriter) run(ctx context.Context) {
	defer close(p.done)
	if !cache.WaitForCacheSync(ctx.Done(), p.inf.HasSynced) {
		return
	}
	// One item: the node's slices, synced whole.
	const item = "slices"
	retries := workqueue.NewTypedItemExponentialFailureRateLimiter[string](100*time.Millisecond, 30*time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		err := p.sync(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			retries.Forget(item)
			continue
		}
		p.onError(ctx, err, "publishing ResourceSlices")
		time.AfterFunc(retries.When(item), p.poke)
	}
}

// Stop stops publishing; the slices stay (the driver-name change deletes
// them on purpose).
func (p *SliceWriter) Stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.started, p.cancel = false, nil
	p.mu.Unlock()
	if cancel != nil {
		cancel()
		<-done
	}
}

// skinny is the informer's transform: a slice without its devices, with
// the hash of its spec as the apiserver has it (localSpecHash).
func skinny(o any) (any, error) {
	s, ok := o.(*resourceapi.ResourceSlice)
	if !ok {
		return o, nil
	}
	h, err := specHash(&s.Spec)
	if err != nil {
		return nil, err
	}
	out := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion,
			Annotations: map[string]string{localSpecHash: h}},
		Spec: resourceapi.ResourceSliceSpec{Driver: s.Spec.Driver, Pool: s.Spec.Pool, NodeName: s.Spec.NodeName},
	}
	// Of the devices, the taints only (few: a device whose link is
	// down), for their TimeAdded (keepTaintTimes).
	for _, d := range s.Spec.Devices {
		if len(d.Taints) > 0 {
			out.Spec.Devices = append(out.Spec.Devices, resourceapi.Device{Name: d.Name, Taints: d.Taints})
		}
	}
	for _, k := range []string{annotationIndex, annotationHash} {
		if v, ok := s.Annotations[k]; ok {
			out.Annotations[k] = v
		}
	}
	return out, nil
}

// specHash hashes a slice spec (its protobuf form, whose maps the
// generated code writes in key order).
func specHash(spec *resourceapi.ResourceSliceSpec) (string, error) {
	raw, err := spec.Marshal()
	if err != nil {
		return "", fmt.Errorf("hashing a ResourceSlice spec: %w", err)
	}
	h := fnv.New64a()
	_, _ = h.Write(raw)
	return strconv.FormatUint(h.Sum64(), 16), nil
}

// sync brings the node's slices of the driver in line with the desired
// pools.
func (p *SliceWriter) sync(ctx context.Context) error {
	p.mu.Lock()
	desired := p.desired
	p.mu.Unlock()
	if desired == nil {
		return nil
	}
	if err := p.ownerUID(ctx); err != nil {
		return err
	}
	want := slicePools(p.node, Resources(desired))
	have := map[string][]*resourceapi.ResourceSlice{}
	for _, s := range p.actual() {
		have[s.Spec.Pool.Name] = append(have[s.Spec.Pool.Name], s)
	}
	var plans []poolPlan
	names := slices.Collect(maps.Keys(want.Pools))
	for name := range have {
		if _, ok := want.Pools[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	for _, name := range names {
		p.mu.Lock()
		plan, err := planPool(name, want.Pools[name].Slices, have[name], p.ours)
		p.mu.Unlock()
		if err != nil {
			return err
		}
		plans = append(plans, plan)
	}
	// Obsolete slices first, then updates, then new slices.
	var deletes, updates, creates []func(context.Context) error
	for _, plan := range plans {
		for _, s := range plan.deletes {
			deletes = append(deletes, func(ctx context.Context) error { return p.delete(ctx, s) })
		}
		for _, w := range plan.writes {
			if w.cur != nil {
				updates = append(updates, func(ctx context.Context) error { return p.update(ctx, w) })
			} else {
				creates = append(creates, func(ctx context.Context) error { return p.create(ctx, w) })
			}
		}
	}
	for _, phase := range [][]func(context.Context) error{deletes, updates, creates} {
		if err := inParallel(ctx, phase); err != nil {
			return err
		}
	}
	return nil
}

// inParallel runs fs, writeParallelism at once, and joins their errors.
func inParallel(ctx context.Context, fs []func(context.Context) error) error {
	return errors.Join(fanout.NewLimit(writeParallelism).Each(ctx, len(fs), func(i int) error { return fs[i](ctx) })...)
}

// actual is the informer's slices, each replaced by the copy dra wrote
// when that is newer (the informer has not shown dra's write yet: a sync
// would take the old spec for the current one, and update it with a stale
// resource version), with the slices dra created that it does not show
// yet, and without those dra deleted that it still shows.
func (p *SliceWriter) actual() []*resourceapi.ResourceSlice {
	objs := p.inf.GetStore().List()
	synced := p.inf.LastSyncResourceVersion()
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*resourceapi.ResourceSlice
	seen := map[string]bool{}
	for _, o := range objs {
		s, ok := o.(*resourceapi.ResourceSlice)
		if !ok {
			continue
		}
		seen[s.Name] = true
		if p.deleted[s.Name] {
			continue
		}
		if m, ok := p.latest[s.Name]; ok {
			if newer(m.s.ResourceVersion, s.ResourceVersion) && p.stands(m, synced) {
				s = m.s
			} else {
				delete(p.latest, s.Name) // the informer caught up, or someone wrote since
			}
		}
		out = append(out, s)
	}
	for name, m := range p.latest {
		switch {
		case seen[name]:
		case p.stands(m, synced):
			out = append(out, m.s) // created, not shown yet
		default:
			delete(p.latest, name)
		}
	}
	for name := range p.deleted {
		if !seen[name] {
			delete(p.deleted, name)
		}
	}
	return out
}

// stands reports whether m still stands for the informer's copy of its
// slice, the informer being at resource version synced; one that stands
// only because the informer has not passed it yet gets a sync after
// another latestTTL (under p.mu).
func (p *SliceWriter) stands(m mine, synced string) bool {
	if time.Since(m.at) < p.ttl {
		return true
	}
	if !newer(m.s.ResourceVersion, synced) {
		return false
	}
	if p.recheck == nil {
		p.recheck = time.AfterFunc(p.ttl, p.poke)
	} else {
		p.recheck.Reset(p.ttl)
	}
	return true
}

// newer reports whether resource version a is after b. The apiserver's
// versions are integers (etcd's revisions); one that is not is never
// newer.
func newer(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}

// ownerUID reads the node's UID for the slices' owner reference, once.
func (p *SliceWriter) ownerUID(ctx context.Context) error {
	p.mu.Lock()
	have := p.owner != ""
	p.mu.Unlock()
	if have {
		return nil
	}
	n, err := p.kube.CoreV1().Nodes().Get(ctx, p.node, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading node %s for the ResourceSlices' owner: %w", p.node, err)
	}
	p.mu.Lock()
	p.owner = n.UID
	p.mu.Unlock()
	return nil
}

// poolPlan is what a sync writes for one pool.
type poolPlan struct {
	deletes []*resourceapi.ResourceSlice
	writes  []sliceWrite
}

// sliceWrite is one slice to create (cur nil) or update.
type sliceWrite struct {
	cur  *resourceapi.ResourceSlice
	spec resourceapi.ResourceSliceSpec
	// index and hash are the annotations: its place, its spec's hash
	// without the generation.
	index int
	hash  string
	// same is set when the slice has the desired spec already.
	same bool
}

// planPool compares pool's desired slices (want; none when the pool is no
// longer published) with its slices (have, the informer's copies): see
// SliceWriter for the generations. ours is what dra last wrote; a slice
// with no record there (dra restarted) is taken as dra left it when its
// annotation hash matches, and recorded.
func planPool(pool string, want []resourceslice.Slice, have []*resourceapi.ResourceSlice, ours map[string]written) (poolPlan, error) {
	var plan poolPlan
	if len(want) == 0 {
		plan.deletes = have
		return plan, nil
	}
	var gen int64
	for _, s := range have {
		gen = max(gen, s.Spec.Pool.Generation)
	}
	cur := make([]*resourceapi.ResourceSlice, len(want))
	for _, s := range have {
		i, err := strconv.Atoi(s.Annotations[annotationIndex])
		if err != nil || i < 0 || i >= len(want) || s.Spec.Pool.Generation != gen || cur[i] != nil {
			plan.deletes = append(plan.deletes, s)
			continue
		}
		cur[i] = s
	}
	writes := make([]sliceWrite, len(want))
	changed, added := 0, 0
	for i, s := range want {
		w := sliceWrite{cur: cur[i], index: i, spec: resourceapi.ResourceSliceSpec{
			Pool:    resourceapi.ResourcePool{Name: pool, ResourceSliceCount: int64(len(want))},
			Devices: s.Devices,
		}}
		var err error
		if w.hash, err = specHash(&w.spec); err != nil {
			return plan, err
		}
		switch {
		case w.cur == nil:
			added++
		case w.cur.Annotations[annotationHash] != w.hash || changedByOthers(w.cur, ours):
			changed++
		default:
			w.same = true
		}
		writes[i] = w
	}
	if added == 0 && changed == 0 && len(plan.deletes) == 0 {
		return plan, nil
	}
	keep := added == 0 && changed <= 1 && len(plan.deletes) == 0
	for _, w := range writes {
		switch {
		case keep && w.same:
			continue
		case keep:
			w.spec.Pool.Generation = gen
		default: // every slice, the same ones too, under the next generation
			w.spec.Pool.Generation = gen + 1
		}
		plan.writes = append(plan.writes, w)
	}
	return plan, nil
}

// changedByOthers reports whether s is not the slice dra last wrote: its
// resource version moved on and its spec is not the one dra wrote. A slice
// with no record (dra restarted) is recorded as it is.
func changedByOthers(s *resourceapi.ResourceSlice, ours map[string]written) bool {
	w, ok := ours[s.Name]
	if !ok {
		ours[s.Name] = written{resourceVersion: s.ResourceVersion, specHash: s.Annotations[localSpecHash]}
		return false
	}
	return w.resourceVersion != s.ResourceVersion && w.specHash != s.Annotations[localSpecHash]
}

// object is the ResourceSlice of w.
func (p *SliceWriter) object(w sliceWrite) *resourceapi.ResourceSlice {
	p.mu.Lock()
	owner := p.owner
	p.mu.Unlock()
	s := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{annotationIndex: strconv.Itoa(w.index), annotationHash: w.hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: p.node, UID: owner,
				Controller: ptr.To(true)}},
		},
		Spec: w.spec,
	}
	s.Spec.Driver, s.Spec.NodeName = p.driver, ptr.To(p.node)
	if w.cur != nil {
		s.Name, s.ResourceVersion = w.cur.Name, w.cur.ResourceVersion
		s.Spec.Devices = keepTaintTimes(s.Spec.Devices, w.cur)
	} else {
		s.GenerateName = fmt.Sprintf("%s-%s-", p.node, p.driver)
	}
	return s
}

// keepTaintTimes returns devices with the TimeAdded the apiserver gave
// each of their taints in cur kept (a taint of the same key, value and
// effect on the device of the same name): a taint that stays keeps its
// time when its slice is written again for another device's sake, so that
// a NoExecute taint's tolerations count from when it came. The devices
// with a taint to keep are copied, not changed.
func keepTaintTimes(devices []resourceapi.Device, cur *resourceapi.ResourceSlice) []resourceapi.Device {
	had := map[string][]resourceapi.DeviceTaint{}
	for _, d := range cur.Spec.Devices {
		had[d.Name] = d.Taints
	}
	if len(had) == 0 {
		return devices
	}
	out := devices
	for i, d := range devices {
		old := had[d.Name]
		for j, t := range d.Taints {
			k := slices.IndexFunc(old, func(o resourceapi.DeviceTaint) bool {
				return o.Key == t.Key && o.Value == t.Value && o.Effect == t.Effect && o.TimeAdded != nil
			})
			if k < 0 || t.TimeAdded != nil {
				continue
			}
			if &out[0] == &devices[0] {
				out = slices.Clone(devices)
			}
			if &out[i].Taints[0] == &d.Taints[0] {
				out[i].Taints = slices.Clone(d.Taints)
			}
			out[i].Taints[j].TimeAdded = old[k].TimeAdded
		}
	}
	return out
}

func (p *SliceWriter) create(ctx context.Context, w sliceWrite) error {
	s, err := p.kube.ResourceV1().ResourceSlices().Create(ctx, p.object(w), metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("creating a ResourceSlice of pool %s: %w", w.spec.Pool.Name, err)
	}
	return p.stored(s)
}

// update writes w over its slice. A write refused as a conflict reads
// the slice back (readBack) before it returns the error, so that the
// retry plans from the slice as it is.
func (p *SliceWriter) update(ctx context.Context, w sliceWrite) error {
	s, err := p.kube.ResourceV1().ResourceSlices().Update(ctx, p.object(w), metav1.UpdateOptions{})
	if apierrors.IsConflict(err) {
		p.readBack(ctx, w.cur.Name)
	}
	if err != nil {
		return fmt.Errorf("updating ResourceSlice %s: %w", w.cur.Name, err)
	}
	return p.stored(s)
}

// readBack reads slice name as the apiserver has it and lets that copy
// stand for the informer's (latest), as dra's own writes do. A conflict
// means the informer is behind (its watch lags or was closed on it) or
// someone else wrote: planned again from the informer's copy, every retry
// would conflict until the informer caught up. A failed read leaves
// things as they were: the retry plans from the informer as before.
func (p *SliceWriter) readBack(ctx context.Context, name string) {
	s, err := p.kube.ResourceV1().ResourceSlices().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return
	}
	o, err := skinny(s)
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.latest[name] = mine{s: o.(*resourceapi.ResourceSlice), at: time.Now()}
}

// stored records a slice dra wrote.
func (p *SliceWriter) stored(s *resourceapi.ResourceSlice) error {
	o, err := skinny(s)
	if err != nil {
		return err
	}
	sk := o.(*resourceapi.ResourceSlice)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ours[s.Name] = written{resourceVersion: s.ResourceVersion, specHash: sk.Annotations[localSpecHash]}
	p.latest[s.Name] = mine{s: sk, at: time.Now()}
	time.AfterFunc(p.ttl, p.poke)
	return nil
}

func (p *SliceWriter) delete(ctx context.Context, s *resourceapi.ResourceSlice) error {
	err := p.kube.ResourceV1().ResourceSlices().Delete(ctx, s.Name, metav1.DeleteOptions{
		Preconditions: &metav1.Preconditions{UID: ptr.To(s.UID)}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting ResourceSlice %s: %w", s.Name, err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.ours, s.Name)
	delete(p.latest, s.Name)
	p.deleted[s.Name] = true
	return nil
}

// slicePools is res with its pools renamed to node's slice pool names.
func slicePools(node string, res *resourceslice.DriverResources) *resourceslice.DriverResources {
	out := &resourceslice.DriverResources{Pools: make(map[string]resourceslice.Pool, len(res.Pools))}
	for name, pool := range res.Pools {
		out.Pools[slicepool.SlicePool(node, name)] = pool
	}
	return out
}

// deleteSlices deletes the ResourceSlices driver published for node, after
// dra stopped publishing under that name. Slices already gone are fine.
func DeleteSlices(ctx context.Context, client kubernetes.Interface, node, driver string) error {
	rs := client.ResourceV1().ResourceSlices()
	list, err := rs.List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node + ",spec.driver=" + driver})
	if err != nil {
		return fmt.Errorf("listing the ResourceSlices of %s: %w", driver, err)
	}
	for _, s := range list.Items {
		if err := rs.Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ResourceSlice %s: %w", s.Name, err)
		}
	}
	return nil
}
