package controller

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ownWriteTTL is how long an object the reconciler wrote stands for the
// cache's copy at most, when the cache has not shown the write: past it
// the cache is believed (a NodeConfig created and then deleted by someone
// else before the cache showed either is created again).
const ownWriteTTL = time.Minute

// ownWrites are the NodeConfigs and ClusterConfig statuses the reconciler
// wrote, as the apiserver returned them, until its cache shows them. A
// reconcile that follows its own writes closely (each write is an event
// that asks for one) would otherwise plan from the cache's older copies:
// every update of one would conflict, and every create be refused as
// existing, and be retried with backoff, on every node at once when a
// ClusterConfig changes; and the NodeConfigs of a ClusterConfig whose
// status write conflicted wait for the retry.
type ownWrites struct {
	mu sync.Mutex
	m  map[string]ownWrite // by ownKey
}

type ownWrite struct {
	obj client.Object
	at  time.Time
}

// ownKey is obj's kind (its Go type) and name.
func ownKey(obj client.Object) string { return fmt.Sprintf("%T/%s", obj, obj.GetName()) }

// record notes obj as the apiserver returned it from a write.
func (o *ownWrites) record(obj client.Object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]ownWrite{}
	}
	o.m[ownKey(obj)] = ownWrite{obj: obj.DeepCopyObject().(client.Object), at: time.Now()}
}

// forget drops what was noted of obj (deleted).
func (o *ownWrites) forget(obj client.Object) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, ownKey(obj))
}

// overlay is cached (the cache's objects of one kind) with each object
// the reconciler wrote that the cache shows older replaced by the copy
// written, and, when created is true, each it created that the cache does
// not show yet added. What the cache has caught up with, and what is older
// than ownWriteTTL, is no longer noted.
func overlay[T any, PT interface {
	*T
	client.Object
}](o *ownWrites, cached []T, created bool) []T {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.m) == 0 {
		return cached
	}
	out := make([]T, 0, len(cached))
	seen := map[string]bool{}
	for _, item := range cached {
		key := ownKey(PT(&item))
		seen[key] = true
		if w, ok := o.m[key]; ok {
			if time.Since(w.at) < ownWriteTTL && newerVersion(w.obj.GetResourceVersion(), PT(&item).GetResourceVersion()) {
				item = *w.obj.DeepCopyObject().(PT)
			} else {
				delete(o.m, key)
			}
		}
		out = append(out, item)
	}
	if !created {
		return out
	}
	for key, w := range o.m {
		obj, ok := w.obj.(PT)
		switch {
		case !ok || seen[key]:
		case time.Since(w.at) < ownWriteTTL:
			out = append(out, *obj.DeepCopyObject().(PT)) // created, not shown yet
		default:
			delete(o.m, key)
		}
	}
	return out
}

// newerVersion reports whether resource version a is after b. The
// apiserver's versions are integers (etcd's revisions); one that is not
// is never newer.
func newerVersion(a, b string) bool {
	x, err1 := strconv.ParseUint(a, 10, 64)
	y, err2 := strconv.ParseUint(b, 10, 64)
	return err1 == nil && err2 == nil && x > y
}
