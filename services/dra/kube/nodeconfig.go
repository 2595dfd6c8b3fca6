package kube

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// NodeConfigsResource is the NodeConfig resource.
var NodeConfigsResource = v1alpha1.GroupVersion.WithResource("nodeconfigs")

// Applier applies a valid node configuration; an error leaves the previous
// one in force and is reported on the NodeConfig.
type Applier func(ctx context.Context, spec *v1alpha1.NodeConfigSpec, generation int64) error

// NodeConfigWatcher follows the NodeConfig named after the node: a valid
// spec (defaults filled in) is applied at once, without a restart; an
// invalid one is reported on the NodeConfig's status (Accepted=False with
// the reason) and as an event, and the last good one stays in force.
type NodeConfigWatcher struct {
	log      *slog.Logger
	client   dynamic.Interface
	recorder record.EventRecorder
	node     string
	apply    Applier
}

// NewNodeConfigWatcher returns the watcher for node.
func NewNodeConfigWatcher(log *slog.Logger, client dynamic.Interface, recorder record.EventRecorder, node string, apply Applier) *NodeConfigWatcher {
	return &NodeConfigWatcher{log: log, client: client, recorder: recorder, node: node, apply: apply}
}

// Run watches until ctx ends.
func (w *NodeConfigWatcher) Run(ctx context.Context) error {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(w.client, 10*time.Minute, "", func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", w.node).String()
	})
	inf := factory.ForResource(NodeConfigsResource).Informer()
	queue := make(chan struct{}, 1)
	kick := func(any) {
		select {
		case queue <- struct{}{}:
		default:
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: kick, UpdateFunc: func(_, o any) { kick(o) }, DeleteFunc: kick,
	}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	var applied int64 = -1
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-queue:
		}
		obj, exists, err := inf.GetStore().GetByKey(w.node)
		if err != nil {
			continue
		}
		if !exists {
			if applied != 0 {
				w.log.Info("No NodeConfig for this node: running with the defaults")
				if err := w.apply(ctx, v1alpha1.Default(&v1alpha1.NodeConfigSpec{}), 0); err != nil {
					w.log.Error("Applying the default configuration", "error", err)
				}
				applied = 0
			}
			continue
		}
		nc := &v1alpha1.NodeConfig{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, nc); err != nil {
			w.log.Error("Reading the NodeConfig", "error", err)
			continue
		}
		if nc.Generation == applied {
			continue
		}
		applied = nc.Generation
		if !w.handle(ctx, nc) {
			applied = -1 // retried at the next resync or change
		}
	}
}

// handle validates and applies one generation of the NodeConfig. It
// returns false when applying failed and should be tried again.
func (w *NodeConfigWatcher) handle(ctx context.Context, nc *v1alpha1.NodeConfig) bool {
	ok := true
	spec := v1alpha1.Default(nc.Spec.DeepCopy())
	accepted := metav1.Condition{Type: v1alpha1.ConditionAccepted, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonValid,
		Message: "the configuration is valid", ObservedGeneration: nc.Generation}
	applied := metav1.Condition{Type: v1alpha1.ConditionApplied, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonApplied,
		Message: "the node runs this configuration", ObservedGeneration: nc.Generation}
	if err := v1alpha1.Validate(spec); err != nil {
		accepted.Status, accepted.Reason, accepted.Message = metav1.ConditionFalse, v1alpha1.ReasonInvalid, err.Error()
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, v1alpha1.ReasonPending,
			"the last valid configuration stays in force"
		w.recorder.Event(nc, corev1.EventTypeWarning, "InvalidConfig", err.Error())
		w.log.Warn("Invalid NodeConfig; the last good one stays", "generation", nc.Generation, "error", err)
	} else if err := w.apply(ctx, spec, nc.Generation); err != nil {
		ok = false
		applied.Status, applied.Reason, applied.Message = metav1.ConditionFalse, v1alpha1.ReasonApplyFailed, err.Error()
		w.recorder.Event(nc, corev1.EventTypeWarning, "ApplyFailed", err.Error())
		w.log.Error("Applying the NodeConfig", "generation", nc.Generation, "error", err)
	} else {
		w.recorder.Event(nc, corev1.EventTypeNormal, "Applied", fmt.Sprintf("generation %d applied", nc.Generation))
		w.log.Info("NodeConfig applied", "generation", nc.Generation)
	}
	if err := w.writeStatus(ctx, nc, accepted, applied); err != nil {
		w.log.Warn("Writing the NodeConfig status", "error", err)
	}
	return ok
}

func (w *NodeConfigWatcher) writeStatus(ctx context.Context, nc *v1alpha1.NodeConfig, conds ...metav1.Condition) error {
	next := nc.DeepCopy()
	next.Status.ObservedGeneration = nc.Generation
	for _, c := range conds {
		meta.SetStatusCondition(&next.Status.Conditions, c)
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(next)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{Object: obj}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("NodeConfig")
	_, err = w.client.Resource(NodeConfigsResource).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	return err
}
