// Package nodeconfig is dra's handling of the node's NodeConfig: a Watcher
// hands each valid spec to the agent's Applier, retrying failures with a
// backoff; the spec maps onto what dra's parts take (Provisioner, Pools,
// IPPools), a provisioner's refusal back onto the spec's field names
// (ProvisionerError); a StatusWriter keeps the NodeConfig's status
// (conditions, the pools published, the driver name) written, coalescing
// updates; an IPPoolWatch hands the ip pools to the state service and
// keeps their condition and counts in the status current, and
// ManagerWarnings keeps the device managers' condition.
package nodeconfig

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/netdra/netdra/services/dra/slicepool"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/fielderr"
)

// NodeConfigsResource is the NodeConfig resource.
var NodeConfigsResource = v1alpha1.GroupVersion.WithResource("nodeconfigs")

// Applier applies a valid node configuration; an error leaves the previous
// one in force and is reported on the NodeConfig (with the reason of a
// *Refusal, else ApplyFailed). A failed apply is retried after a backoff
// (applyBackoff, stepped per consecutive failure) and at every change of
// the NodeConfig.
type Applier func(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error

// Refusal is an Applier's error for a configuration it will not apply as
// things are: Reason goes on the Applied condition.
type Refusal struct {
	Reason  string
	Message string
}

func (r *Refusal) Error() string { return r.Message }

// applyBackoff paces the retries of a failed apply: 2s doubling up to a
// minute, from 2s again after an apply succeeds.
var applyBackoff = wait.Backoff{Duration: 2 * time.Second, Factor: 2, Steps: math.MaxInt32, Cap: time.Minute}

// Watcher follows the NodeConfig named after the node: a valid
// spec (defaults filled in) is applied at once, without a restart; an
// invalid one is reported on the NodeConfig's status (Accepted=False with
// the reason) and as an event, and the last good one stays in force.
type Watcher struct {
	queue    chan struct{}
	log      *slog.Logger
	client   dynamic.Interface
	recorder record.EventRecorder
	status   *StatusWriter
	node     string
	apply    Applier
}

// NewWatcher returns the watcher for node; it reports on the
// NodeConfig's status through status.
func NewWatcher(log *slog.Logger, client dynamic.Interface, recorder record.EventRecorder, status *StatusWriter, node string, apply Applier) *Watcher {
	return &Watcher{queue: make(chan struct{}, 1), log: log, client: client, recorder: recorder, status: status, node: node, apply: apply}
}

// Retry has a configuration whose apply failed tried again now, rather
// than after its backoff.
func (w *Watcher) Retry() {
	select {
	case w.queue <- struct{}{}:
	default:
	}
}

// Run watches until ctx ends, and returns ctx's error then, or an
// informer that could not be set up.
func (w *Watcher) Run(ctx context.Context) error {
	inf, err := w.informer()
	if err != nil {
		return err
	}
	ictx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ictx) }()
	defer func() { stop(); <-done }()
	var applied int64 = -1
	retry := applyBackoff
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-w.queue:
		}
		var res lookResult
		applied, res = w.look(ctx, inf.GetStore(), applied)
		switch res {
		case lookApplied:
			retry = applyBackoff
		case lookFailed:
			// Retried at the next change, or after a backoff: a
			// refusal (a driverName change while claims are prepared)
			// or an unreachable provisioner may clear by itself.
			time.AfterFunc(retry.Step(), w.Retry)
		}
	}
}

// informer is the informer of the node's NodeConfig, which asks Run to
// look at it at each change. A plain informer on the dynamic client:
// dynamicinformer's factory would link client-go's informers and listers
// of every API group into dra.
func (w *Watcher) informer() (cache.SharedIndexInformer, error) {
	sel := fields.OneTermEqualSelector("metadata.name", w.node).String()
	res := w.client.Resource(NodeConfigsResource)
	inf := cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return res.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return res.Watch(ctx, o)
		},
	}, &unstructured.Unstructured{}, 10*time.Minute, cache.Indexers{})
	// Nothing here reads who wrote which field.
	_ = inf.SetTransform(func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		return obj, nil
	})
	kick := func(any) { w.Retry() }
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
	}); err != nil {
		return nil, err
	}
	return inf, nil
}

// lookResult is what a look at the NodeConfig did.
type lookResult int

const (
	lookNothing lookResult = iota // nothing new to apply, or nothing readable
	lookApplied                   // a generation (or the defaults) applied
	lookFailed                    // an apply failed: retry it
)

// look applies the node's NodeConfig as store has it when its generation
// is not the one applied (the defaults, generation 0, when there is
// none). It returns the generation applied from now on (-1 after a failed
// apply, so that the next look applies it again) and what it did.
func (w *Watcher) look(ctx context.Context, store cache.Store, applied int64) (int64, lookResult) {
	obj, exists, err := store.GetByKey(w.node)
	if err != nil {
		return applied, lookNothing
	}
	if !exists {
		if applied != 0 {
			w.log.Info("No NodeConfig for this node: running with the defaults")
			if err := w.apply(ctx, v1alpha1.Default(&v1alpha1.NodeConfigSpec{}), 0); err != nil {
				w.log.Error("Applying the default configuration", "error", err)
			}
		}
		return 0, lookNothing
	}
	nc := &v1alpha1.NodeConfig{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, nc); err != nil {
		w.log.Error("Reading the NodeConfig", "error", err)
		return applied, lookNothing
	}
	if nc.Generation == applied {
		w.status.Check(nc.Status) // rewritten when someone changed it
		return applied, lookNothing
	}
	if w.handle(ctx, nc) {
		return nc.Generation, lookApplied
	}
	return -1, lookFailed
}

// validate is v1alpha1.Validate, and then whether each pool's ResourceSlice
// pool name on node (slicepool.SlicePool) is within the API's limit: the
// apiserver would refuse it.
func validate(node string, spec *v1alpha1.NodeConfigSpec) error {
	if err := v1alpha1.Validate(spec); err != nil {
		return err
	}
	for i, p := range spec.Pools {
		if err := slicepool.Check(node, p.Name); err != nil {
			return fielderr.New(fmt.Sprintf("pools[%d].name", i), "%s", err)
		}
	}
	return nil
}

// handle validates and applies one generation of the NodeConfig. It
// returns false when applying failed and should be tried again.
func (w *Watcher) handle(ctx context.Context, nc *v1alpha1.NodeConfig) bool {
	ok := true
	spec := v1alpha1.Default(nc.Spec.DeepCopy())
	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid,
		Message: "the configuration is valid", ObservedGeneration: nc.Generation}
	applied := metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied,
		Message: "the node runs this configuration", ObservedGeneration: nc.Generation}
	if err := validate(w.node, spec); err != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalid, err.Error()
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, v1alpha1.ReasonPending,
			"the last valid configuration stays in force"
		w.recorder.Event(nc, corev1.EventTypeWarning, "InvalidConfig", err.Error())
		w.log.Warn("Invalid NodeConfig; the last good one stays", "generation", nc.Generation, "error", err)
	} else if err := w.apply(ctx, spec, nc.Generation); err != nil {
		ok = false
		reason := v1alpha1.ReasonApplyFailed
		if r := (*Refusal)(nil); errors.As(err, &r) {
			reason = r.Reason
		}
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, reason, err.Error()
		if c := meta.FindStatusCondition(nc.Status.Conditions, v1alpha1.ConditionApplied); c == nil || c.Message != applied.Message || c.ObservedGeneration != nc.Generation {
			w.recorder.Event(nc, corev1.EventTypeWarning, reason, err.Error()) // once, not at every retry
		}
		w.log.Error("Applying the NodeConfig", "generation", nc.Generation, "error", err)
	} else {
		// No event: the Applied condition (with its generation) says it,
		// and an event is a write on every node at every cluster-wide
		// change; only what went wrong gets one.
		w.log.Info("NodeConfig applied", "generation", nc.Generation)
	}
	w.status.SetConditions(nc.Generation, nc.Status.Conditions, accepted, applied)
	w.status.Check(nc.Status)
	return ok
}
