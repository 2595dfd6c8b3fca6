package node

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
)

// Event reasons, as the kubelet records them.
const (
	ReasonFailedPrepare       = "FailedPrepareDynamicResources"
	ReasonFailedCreateSandbox = "FailedCreatePodSandBox"
	ReasonFailedUnprepare     = "FailedUnprepareDynamicResources"
	ReasonFailedKillPod       = "FailedKillPod"
	uidIndex                  = "uid"
	containerIDScheme         = "testworld://"
)

// podWorkers syncs every pod bound to the node from an informer, one pod at
// a time per pod, with exponential backoff on failure.
type podWorkers struct {
	n        *Node
	factory  informers.SharedInformerFactory
	informer cache.SharedIndexInformer
	queue    workqueue.TypedRateLimitingInterface[types.UID]
	events   record.EventBroadcaster
	recorder record.EventRecorder

	mu    sync.Mutex
	state map[types.UID]*podState
}

// podState is what the node did for one pod.
type podState struct {
	claims  []types.UID // claims a prepare was attempted for
	sandbox *sandbox
	running bool // Running status written
}

func newPodWorkers(n *Node, limiter workqueue.TypedRateLimiter[types.UID]) *podWorkers {
	return &podWorkers{
		n: n,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter,
			workqueue.TypedRateLimitingQueueConfig[types.UID]{Name: "testworld-pods-" + n.cfg.NodeName}),
		state: map[types.UID]*podState{},
	}
}

func (w *podWorkers) start(ctx context.Context, wg *sync.WaitGroup) error {
	n := w.n
	w.events = record.NewBroadcaster(record.WithContext(ctx))
	w.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: n.client.CoreV1().Events("")})
	w.recorder = w.events.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "kubelet", Host: n.cfg.NodeName})

	w.factory = informers.NewSharedInformerFactoryWithOptions(n.client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = "spec.nodeName=" + n.cfg.NodeName
		}))
	w.informer = w.factory.Core().V1().Pods().Informer()
	if err := w.informer.AddIndexers(cache.Indexers{uidIndex: func(obj any) ([]string, error) {
		return []string{string(obj.(*corev1.Pod).UID)}, nil
	}}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if pod, ok := obj.(*corev1.Pod); ok {
			w.queue.Add(pod.UID)
		}
	}
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return fmt.Errorf("pod informer: %w", err)
	}
	w.factory.Start(ctx.Done())
	for typ, ok := range w.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("pod informer %v did not sync", typ)
		}
	}
	for range n.cfg.Workers {
		wg.Go(func() {
			for w.next(ctx) {
			}
		})
	}
	return nil
}

func (w *podWorkers) shutdown() {
	w.queue.ShutDown()
	if w.factory != nil {
		w.factory.Shutdown()
	}
}

func (w *podWorkers) next(ctx context.Context) bool {
	uid, quit := w.queue.Get()
	if quit {
		return false
	}
	defer w.queue.Done(uid)
	if err := w.sync(ctx, uid); err != nil {
		if ctx.Err() == nil {
			w.n.log.Info("pod sync failed, retrying", "podUID", uid, "err", err)
		}
		w.queue.AddRateLimited(uid)
		return true
	}
	w.queue.Forget(uid)
	return true
}

// pod returns the informer's copy of the pod, or nil once it is gone.
func (w *podWorkers) pod(uid types.UID) *corev1.Pod {
	objs, err := w.informer.GetIndexer().ByIndex(uidIndex, string(uid))
	if err != nil || len(objs) == 0 {
		return nil
	}
	return objs[0].(*corev1.Pod)
}

func (w *podWorkers) podState(uid types.UID, create bool) *podState {
	w.mu.Lock()
	defer w.mu.Unlock()
	st := w.state[uid]
	if st == nil && create {
		st = &podState{}
		w.state[uid] = st
	}
	return st
}

func (w *podWorkers) sync(ctx context.Context, uid types.UID) error {
	pod := w.pod(uid)
	switch {
	case pod == nil:
		return w.teardown(ctx, uid, nil)
	case pod.DeletionTimestamp != nil:
		if err := w.teardown(ctx, uid, pod); err != nil {
			return err
		}
		return w.deletePod(ctx, pod)
	case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
		return w.teardown(ctx, uid, pod)
	default:
		return w.run(ctx, pod)
	}
}

// run prepares the pod's claims, creates its sandbox and reports it
// Running, each step once.
func (w *podWorkers) run(ctx context.Context, pod *corev1.Pod) error {
	st := w.podState(pod.UID, true)
	if st.running {
		return nil
	}
	log := w.n.log.With("pod", pod.Namespace+"/"+pod.Name)
	if st.sandbox == nil {
		claims, ready, err := resolveClaims(ctx, w.n.client, pod)
		if err == nil && !ready {
			log.Debug("waiting for the pod's claims to be named in its status")
			return nil
		}
		if err == nil {
			st.claims = mergeUIDs(st.claims, claims)
			err = w.n.claims.prepare(ctx, pod.UID, claims)
		}
		if err != nil {
			w.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedPrepare, "Failed to prepare dynamic resources: %v", err)
			return fmt.Errorf("preparing claims: %w", err)
		}
		sb, err := w.n.runtime.run(ctx, pod)
		if err != nil {
			w.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedCreateSandbox, "Failed to create pod sandbox: %v", err)
			return fmt.Errorf("creating sandbox: %w", err)
		}
		st.sandbox = sb
		log.Info("sandbox running", "netns", sb.netns, "sandbox", sb.id[:12])
	}
	if err := w.markRunning(ctx, pod, st.sandbox); err != nil {
		return fmt.Errorf("reporting pod running: %w", err)
	}
	st.running = true
	return nil
}

func mergeUIDs(have []types.UID, claims []podClaim) []types.UID {
	for _, c := range claims {
		found := false
		for _, h := range have {
			found = found || h == c.UID
		}
		if !found {
			have = append(have, c.UID)
		}
	}
	return have
}

// teardown stops and removes the pod's sandbox, then unprepares its claims,
// as the kubelet kills a pod and then cleans up after it.
func (w *podWorkers) teardown(ctx context.Context, uid types.UID, pod *corev1.Pod) error {
	st := w.podState(uid, false)
	if st == nil {
		return nil
	}
	if st.sandbox != nil {
		if err := w.n.runtime.stopAndRemove(ctx, st.sandbox); err != nil {
			if pod != nil {
				w.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedKillPod, "error killing pod: %v", err)
			}
			return fmt.Errorf("stopping sandbox: %w", err)
		}
		st.sandbox = nil
		st.running = false
	}
	if err := w.n.claims.release(ctx, uid, st.claims); err != nil {
		if pod != nil {
			w.recorder.Eventf(pod, corev1.EventTypeWarning, ReasonFailedUnprepare, "Failed to unprepare dynamic resources: %v", err)
		}
		return fmt.Errorf("unpreparing claims: %w", err)
	}
	w.mu.Lock()
	delete(w.state, uid)
	w.mu.Unlock()
	return nil
}

// deletePod finishes a graceful deletion, as the kubelet's status manager
// does once the pod's containers are gone.
func (w *podWorkers) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := w.n.client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      metav1.NewUIDPreconditions(string(pod.UID)),
	})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting pod: %w", err)
	}
	return nil
}

// markRunning writes the status the kubelet would write once every
// container started: phase Running, the pod conditions true, each
// container running and ready.
func (w *podWorkers) markRunning(ctx context.Context, pod *corev1.Pod, sb *sandbox) error {
	pods := w.n.client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID || cur.DeletionTimestamp != nil {
			return nil // replaced or going away: the next sync handles it
		}
		cur.Status = runningStatus(cur, sb, time.Now())
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func runningStatus(pod *corev1.Pod, sb *sandbox, at time.Time) corev1.PodStatus {
	now := metav1.NewTime(at)
	st := *pod.Status.DeepCopy()
	st.Phase = corev1.PodRunning
	st.HostIP = hostIP
	st.HostIPs = []corev1.HostIP{{IP: hostIP}}
	if pod.Spec.HostNetwork {
		st.PodIP = hostIP
		st.PodIPs = []corev1.PodIP{{IP: hostIP}}
	}
	if st.StartTime == nil {
		st.StartTime = &now
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReadyToStartContainers, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		st.Conditions = setCondition(st.Conditions, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now})
	}
	st.InitContainerStatuses = nil
	for _, c := range pod.Spec.InitContainers {
		st.InitContainerStatuses = append(st.InitContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true,
			ContainerID: containerIDScheme + sb.id[:16] + "-" + c.Name,
			State:       corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed", StartedAt: now, FinishedAt: now}},
		})
	}
	st.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, corev1.ContainerStatus{
			Name: c.Name, Image: c.Image, ImageID: c.Image, Ready: true, Started: ptr.To(true),
			ContainerID: containerIDScheme + sb.id[:16] + "-" + c.Name,
			State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
		})
	}
	return st
}

func setCondition(conds []corev1.PodCondition, c corev1.PodCondition) []corev1.PodCondition {
	for i := range conds {
		if conds[i].Type == c.Type {
			if conds[i].Status != c.Status {
				conds[i] = c
			}
			return conds
		}
	}
	return append(conds, c)
}
