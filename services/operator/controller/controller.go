// Package controller runs the operator's one controller on a
// controller-runtime manager: every change to a Node's labels, a
// ClusterConfig's spec or a NodeConfig's spec or labels, and a periodic
// refresh, trigger one cluster-wide reconcile that lists the three kinds
// from the cache, asks package plan what they should be and makes the
// writes. Leader election on a Lease keeps replicas from writing at the
// same time.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/netdra/netdra/services/operator/plan"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// Name is the controller's name, in its logs and metrics.
const Name = "netdra-operator"

// DefaultRefresh is how often the whole cluster is re-checked without any
// event, so that a change whose event was missed is acted on all the same.
const DefaultRefresh = 5 * time.Minute

// everything is the one reconcile key: every decision is cluster-wide.
var everything = reconcile.Request{NamespacedName: types.NamespacedName{Name: "cluster"}}

// Reconciler keeps the NodeConfigs and ClusterConfig statuses where package
// plan says they belong.
//
// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch
// +kubebuilder:rbac:groups=netdra.io,resources=clusterconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups=netdra.io,resources=clusterconfigs/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=netdra.io,resources=nodeconfigs,verbs=get;list;watch;create;update;delete
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
type Reconciler struct {
	// Client reads (from the cache) and writes.
	Client client.Client
	// Log logs every write.
	Log *slog.Logger
	// Refresh is how long after a reconcile the next one comes at the
	// latest; 0 is DefaultRefresh.
	Refresh time.Duration
	// Now is the clock for condition transitions; nil is time.Now.
	Now func() time.Time

	own ownWrites
}

var _ reconcile.Reconciler = (*Reconciler)(nil)

// SetupWithManager registers the controller and its watches with mgr.
// Nodes are watched as metadata only, and only label changes count; status
// writes (ours, dra's) do not trigger a reconcile, except a change of
// dra's address counts (NodeConfig status.ipPools).
func (r *Reconciler) SetupWithManager(mgr manager.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{everything}
	})
	return builder.ControllerManagedBy(mgr).
		Named(Name).
		WatchesMetadata(&corev1.Node{}, all, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&v1alpha1.ClusterConfig{}, all, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Watches(&v1alpha1.NodeConfig{}, all, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, ipPoolUsageChanged))).
		Complete(r)
}

// ipPoolUsageChanged passes a NodeConfig whose status.ipPools (dra's
// address counts) changed: a cluster address pool may run low.
var ipPoolUsageChanged = predicate.Funcs{
	UpdateFunc: func(e event.UpdateEvent) bool {
		oldNC, okOld := e.ObjectOld.(*v1alpha1.NodeConfig)
		newNC, okNew := e.ObjectNew.(*v1alpha1.NodeConfig)
		return okOld && okNew && !equality.Semantic.DeepEqual(oldNC.Status.IPPools, newNC.Status.IPPools)
	},
}

// Reconcile brings the whole cluster in line and asks to run again after
// Refresh. Each write is tried; the error joins those that failed, and the
// controller retries them with backoff.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	nodes, configs, existing, err := r.list(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	res := plan.Compute(nodes, configs, metav1.NewTime(now()))
	plan.CarveAddressPools(&res, configs, existing, metav1.NewTime(now()))
	if err := r.apply(ctx, plan.Diff(res, existing, configs)); err != nil {
		return reconcile.Result{}, err
	}
	refresh := r.Refresh
	if refresh <= 0 {
		refresh = DefaultRefresh
	}
	return reconcile.Result{RequeueAfter: refresh}, nil
}

// list reads the Nodes, ClusterConfigs and NodeConfigs from the cache, the
// ClusterConfigs and NodeConfigs with the reconciler's own writes the
// cache does not show yet (ownWrites).
func (r *Reconciler) list(ctx context.Context) ([]plan.Node, []v1alpha1.ClusterConfig, []v1alpha1.NodeConfig, error) {
	var nodeList metav1.PartialObjectMetadataList
	nodeList.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.Client.List(ctx, &nodeList); err != nil {
		return nil, nil, nil, fmt.Errorf("list nodes: %w", err)
	}
	nodes := make([]plan.Node, 0, len(nodeList.Items))
	for _, n := range nodeList.Items {
		nodes = append(nodes, plan.Node{Name: n.Name, Labels: n.Labels})
	}
	var configs v1alpha1.ClusterConfigList
	if err := r.Client.List(ctx, &configs); err != nil {
		return nil, nil, nil, fmt.Errorf("list ClusterConfigs: %w", err)
	}
	var existing v1alpha1.NodeConfigList
	if err := r.Client.List(ctx, &existing); err != nil {
		return nil, nil, nil, fmt.Errorf("list NodeConfigs: %w", err)
	}
	return nodes, overlay(&r.own, configs.Items, false), overlay(&r.own, existing.Items, true), nil
}

// writeParallelism is how many NodeConfig writes a reconcile has in
// flight at once: one write waits for the apiserver's round trip, and a
// ClusterConfig change writes the NodeConfig of every node it governs, so
// written one after the other the last node would wait for all the others.
const writeParallelism = 16

// apply makes the writes. ClusterConfig statuses go first: they record
// the address blocks, so a NodeConfig never holds a block its
// ClusterConfig's status does not. The NodeConfigs of a ClusterConfig
// whose status write failed (a conflict: the cache was behind) wait for
// the retry, which decides again from the status as it is. The NodeConfig
// writes (each of its own node) are then made writeParallelism at a time.
func (r *Reconciler) apply(ctx context.Context, acts plan.Actions) error {
	var errs []error
	failed := map[string]bool{}
	for _, cc := range acts.Status {
		r.Log.Info("Updating ClusterConfig status", "clusterConfig", cc.Name, "nodes", cc.Status.Nodes)
		if err := r.Client.Status().Update(ctx, cc); err != nil && !apierrors.IsNotFound(err) {
			failed[cc.Name] = true
			errs = append(errs, fmt.Errorf("update ClusterConfig %s status: %w", cc.Name, err))
		} else if err == nil {
			r.own.record(cc)
		}
	}
	var writes []func() error
	for _, nc := range acts.Create {
		if failed[nc.Labels[v1alpha1.LabelClusterConfig]] {
			continue
		}
		writes = append(writes, func() error {
			r.Log.Info("Creating NodeConfig", "node", nc.Name, "clusterConfig", nc.Labels[v1alpha1.LabelClusterConfig])
			if err := r.Client.Create(ctx, nc); err != nil {
				return fmt.Errorf("create NodeConfig %s: %w", nc.Name, err)
			}
			r.own.record(nc)
			return nil
		})
	}
	for _, nc := range acts.Update {
		if failed[nc.Labels[v1alpha1.LabelClusterConfig]] {
			continue
		}
		writes = append(writes, func() error {
			r.Log.Info("Updating NodeConfig", "node", nc.Name, "clusterConfig", nc.Labels[v1alpha1.LabelClusterConfig])
			if err := r.Client.Update(ctx, nc); err != nil {
				return fmt.Errorf("update NodeConfig %s: %w", nc.Name, err)
			}
			r.own.record(nc)
			return nil
		})
	}
	for _, nc := range acts.Delete {
		writes = append(writes, func() error { return r.delete(ctx, nc) })
	}
	return errors.Join(append(errs, inParallel(writes, writeParallelism)...)...)
}

// inParallel runs every write, at most n at once, and returns their
// errors.
func inParallel(writes []func() error, n int) []error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	next := make(chan func() error)
	for range min(n, len(writes)) {
		wg.Go(func() {
			for w := range next {
				if err := w(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	for _, w := range writes {
		next <- w
	}
	close(next)
	wg.Wait()
	return errs
}

// delete deletes one NodeConfig no ClusterConfig assigns.
func (r *Reconciler) delete(ctx context.Context, nc *v1alpha1.NodeConfig) error {
	r.Log.Info("Deleting NodeConfig", "node", nc.Name, "clusterConfig", nc.Labels[v1alpha1.LabelClusterConfig])
	// The preconditions keep a NodeConfig that changed since the
	// cache saw it (a hand-made one in its place) from going.
	err := r.Client.Delete(ctx, nc, client.Preconditions{UID: &nc.UID, ResourceVersion: &nc.ResourceVersion})
	r.own.forget(nc)
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete NodeConfig %s: %w", nc.Name, err)
	}
	return nil
}
