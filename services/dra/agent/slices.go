package agent

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/services/dra/slicepool"
)

// SliceSyncDelay is how soon dra puts back a ResourceSlice that someone
// else changed or deleted. The kubelet deletes every slice of its node when
// it starts; with the resourceslice controller's default (30 s), which the
// kubelet plugin helper's PublishResources uses and cannot change, a
// restarted kubelet left new pods unschedulable for 30 s (found on the real
// node: the first pod with a claim took 24.9 s instead of 0.7 s). The
// informer event that schedules the sync has already updated the cache, so
// a short delay only coalesces a burst of deletions: the kubelet's is one
// DeleteCollection, whose events come within milliseconds of each other.
// Every millisecond of it is on the path of the first pods with claims
// after a kubelet restart (issue 21 point 4).
const SliceSyncDelay = 50 * time.Millisecond

// slicePublisher publishes one driver's ResourceSlices for the node through
// a resourceslice controller of its own, started at the first Publish.
type slicePublisher struct {
	driver, node string
	kube         kubernetes.Interface
	onError      func(ctx context.Context, err error, msg string)

	mu   sync.Mutex
	ctrl *resourceslice.Controller
}

// Publish replaces the published slices with res, whose pools are keyed by
// netdra's pool names: they are published under their slice pool names
// (slicepool.SlicePool). The controller retries failed writes itself and
// reports them to onError.
func (p *slicePublisher) Publish(ctx context.Context, res *resourceslice.DriverResources) error {
	res = slicePools(p.node, res)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctrl != nil {
		p.ctrl.Update(res)
		return nil
	}
	ctrl, err := resourceslice.StartController(context.WithoutCancel(ctx), resourceslice.Options{
		DriverName:   p.driver,
		KubeClient:   p.kube,
		Owner:        &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: p.node},
		Resources:    res,
		SyncDelay:    ptr.To(SliceSyncDelay),
		ErrorHandler: p.onError,
	})
	if err != nil {
		return fmt.Errorf("starting the ResourceSlice controller: %w", err)
	}
	p.ctrl = ctrl
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

// Stop stops publishing; the slices stay (the driver-name change deletes
// them on purpose).
func (p *slicePublisher) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctrl != nil {
		p.ctrl.Stop()
		p.ctrl = nil
	}
}

// deleteSlices deletes the ResourceSlices driver published for node, after
// dra stopped publishing under that name. Slices already gone are fine.
func deleteSlices(ctx context.Context, client kubernetes.Interface, node, driver string) error {
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
