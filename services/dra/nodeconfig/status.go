package nodeconfig

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/debounce"
)

// StatusWriter owns the status of the node's NodeConfig: the conditions
// and observed generation of the configuration in force (from the
// watcher), the pools last published, the address counts of the ip pools
// and the driver name dra is registered under. Every write is one merge patch of the whole status it
// owns, made by one goroutine, so writes never race each other or conflict
// with spec changes; a write that fails is retried, one for a missing
// NodeConfig when the next change comes. The changes of a burst (a
// NodeConfig applied, then its pools published and its address pools
// counted) go in one write (statusQuiet, statusMaxWait).
type StatusWriter struct {
	log    *slog.Logger
	client dynamic.Interface
	node   string
	kick   chan struct{}

	mu      sync.Mutex
	want    v1alpha1.NodeConfigStatus
	written *v1alpha1.NodeConfigStatus
	// kept are the conditions SetCondition set, by type: SetConditions
	// keeps them over the NodeConfig's as read, which may not have them
	// yet.
	kept map[string]metav1.Condition
}

// NewStatusWriter returns the status writer for node's NodeConfig.
func NewStatusWriter(log *slog.Logger, client dynamic.Interface, node string) *StatusWriter {
	return &StatusWriter{log: log, client: client, node: node, kick: make(chan struct{}, 1)}
}

// SetConditions sets the observed generation and the conditions: each
// replaces the one of its type in base (the NodeConfig's current ones),
// keeping its transition time when its status did not change. A condition
// SetCondition set is kept as it set it.
func (w *StatusWriter) SetConditions(generation int64, base []metav1.Condition, conds ...metav1.Condition) {
	w.update(func(s *v1alpha1.NodeConfigStatus) {
		s.ObservedGeneration = generation
		kept := slices.SortedFunc(maps.Values(w.kept), func(a, b metav1.Condition) int { return strings.Compare(a.Type, b.Type) })
		s.Conditions = mergeConditions(mergeConditions(base, kept), conds)
	})
}

// SetCondition sets one condition, keeping the others; SetConditions keeps
// it too, until SetCondition sets its type again.
func (w *StatusWriter) SetCondition(c metav1.Condition) {
	w.update(func(s *v1alpha1.NodeConfigStatus) {
		s.Conditions = mergeConditions(s.Conditions, []metav1.Condition{c})
		if w.kept == nil {
			w.kept = map[string]metav1.Condition{}
		}
		w.kept[c.Type] = *meta.FindStatusCondition(s.Conditions, c.Type)
	})
}

// SetPublished sets the pools last published, in publication order.
func (w *StatusWriter) SetPublished(pools []v1alpha1.PoolStatus) {
	w.update(func(s *v1alpha1.NodeConfigStatus) {
		s.Pools = int32(len(pools))
		s.PublishedPools = slices.Clone(pools)
	})
}

// SetIPPools sets the address counts of the node-local pools.
func (w *StatusWriter) SetIPPools(pools []v1alpha1.IPPoolUsage) {
	w.update(func(s *v1alpha1.NodeConfigStatus) { s.IPPools = slices.Clone(pools) })
}

// SetDriverName sets the driver name dra is registered under.
func (w *StatusWriter) SetDriverName(name string) {
	w.update(func(s *v1alpha1.NodeConfigStatus) { s.DriverName = name })
}

// Check compares the NodeConfig's status as read with the one wanted and
// has it written again when they differ (a NodeConfig re-created, or its
// status changed by someone else).
func (w *StatusWriter) Check(cur v1alpha1.NodeConfigStatus) {
	w.mu.Lock()
	differs := !statusEqual(cur, w.want)
	if differs {
		w.written = nil
	}
	w.mu.Unlock()
	if differs {
		w.poke()
	}
}

func (w *StatusWriter) update(change func(*v1alpha1.NodeConfigStatus)) {
	w.mu.Lock()
	change(&w.want)
	w.mu.Unlock()
	w.poke()
}

func (w *StatusWriter) poke() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// statusQuiet and statusMaxWait bound how long a change waits for the
// ones that follow it before the status is written (debounce.Wait): a
// status written a moment later is one write per node instead of one per
// step of a change, on every node at once when a ClusterConfig changes.
const (
	statusQuiet   = 200 * time.Millisecond
	statusMaxWait = time.Second
)

// Run writes until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.kick:
		}
		debounce.Wait(ctx, w.kick, statusQuiet, statusMaxWait)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.mu.Lock()
		want := *w.want.DeepCopy()
		same := w.written != nil && statusEqual(*w.written, want)
		w.mu.Unlock()
		if same {
			continue
		}
		err := w.write(ctx, want)
		switch {
		case err == nil:
			w.mu.Lock()
			w.written = &want
			w.mu.Unlock()
		case apierrors.IsNotFound(err):
			w.log.Debug("No NodeConfig to write the status of")
		case ctx.Err() == nil:
			w.log.Warn("Writing the NodeConfig status", "error", err)
			time.AfterFunc(time.Second, w.poke)
		}
	}
}

func (w *StatusWriter) write(ctx context.Context, st v1alpha1.NodeConfigStatus) error {
	// Every owned field is sent, zero or not, so that a merge patch clears
	// what is gone.
	patch, err := json.Marshal(map[string]any{"status": map[string]any{
		"observedGeneration": st.ObservedGeneration,
		"conditions":         nonNil(st.Conditions),
		"pools":              st.Pools,
		"publishedPools":     nonNil(st.PublishedPools),
		"ipPools":            nonNil(st.IPPools),
		"driverName":         st.DriverName,
	}})
	if err != nil {
		return err
	}
	_, err = w.client.Resource(NodeConfigsResource).Patch(ctx, w.node, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// PublishedPools is the NodeConfig status of the published pools, by
// name.
func PublishedPools(ps []publish.Pool) []v1alpha1.PoolStatus {
	out := []v1alpha1.PoolStatus{}
	for _, p := range slices.SortedFunc(slices.Values(ps), func(a, b publish.Pool) int { return strings.Compare(a.Name, b.Name) }) {
		out = append(out, v1alpha1.PoolStatus{Name: p.Name, Devices: int32(len(p.Devices))})
	}
	return out
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// statusEqual compares the fields the writer owns.
func statusEqual(a, b v1alpha1.NodeConfigStatus) bool {
	owned := func(s v1alpha1.NodeConfigStatus) string {
		j, _ := json.Marshal(v1alpha1.NodeConfigStatus{ObservedGeneration: s.ObservedGeneration, Conditions: s.Conditions,
			Pools: s.Pools, PublishedPools: s.PublishedPools, IPPools: s.IPPools, DriverName: s.DriverName})
		return string(j)
	}
	return owned(a) == owned(b)
}

// mergeConditions returns base with each of conds set in it.
func mergeConditions(base, conds []metav1.Condition) []metav1.Condition {
	out := slices.Clone(base)
	for _, c := range conds {
		meta.SetStatusCondition(&out, c)
	}
	return out
}
