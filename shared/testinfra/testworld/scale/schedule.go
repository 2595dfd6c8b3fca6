package scale

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/netdra/netdra/bench/figures"
)

// schedNamespace holds the scheduling phase's pods.
const schedNamespace = "scale"

// podKind is one kind of pod the scheduling phase creates.
type podKind struct {
	name     string
	template string // the ResourceClaimTemplate of its claim; "" for none
	count    int
}

// schedule creates o.Pods pods without a claim, o.Pods pods with a claim
// for one VF, and o.Pods/2 pods with a claim for two VFs under one PCIe
// root (matchAttribute), one kind after the other in the same cluster,
// and records each kind's pods per second: from the first pod created to
// the last one bound by the scheduler. With o.ComponentQPS set it then
// restarts the control plane with the controller-manager's and
// scheduler's client limits raised to it and does the same again (the
// earlier pods stay: the cluster is fuller the second time).
func schedule(ctx context.Context, w *world, o Options, res *figures.Scale) error {
	c := w.c
	if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: schedNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "netdra-vf"}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)}}}}}
	if _, err := c.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		return err
	}
	one := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "vf"}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
			{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dc.Name}}}}}}}
	root := "resource.kubernetes.io/pcieRoot"
	two := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "two-vfs-one-root"}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: dc.Name,
				AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 2}}},
			Constraints: []resourceapi.DeviceConstraint{{MatchAttribute: (*resourceapi.FullyQualifiedName)(&root)}}}}}}
	for _, t := range []*resourceapi.ResourceClaimTemplate{one, two} {
		if _, err := c.ResourceV1().ResourceClaimTemplates(schedNamespace).Create(ctx, t, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	bound := newBindWatch(ctx, c)
	res.SchedPods = o.Pods
	res.SchedPodsPerSec = map[string]float64{}
	res.SchedRateWaitS = map[string]float64{}
	res.SchedCPCPUS, res.SchedSimCPUS = map[string]float64{}, map[string]float64{}
	kinds := []podKind{{"no claim", "", o.Pods}, {"1 VF claim", one.Name, o.Pods}, {"2 VFs, one pcieRoot (matchAttribute)", two.Name, o.Pods / 2}}
	round := func(suffix string) error {
		for _, k := range kinds {
			k.name += suffix
			if err := scheduleKind(ctx, w, o, res, bound, k); err != nil {
				return err
			}
		}
		return nil
	}
	if err := round(""); err != nil {
		return err
	}
	if o.ComponentQPS <= 0 {
		return nil
	}
	o.Logger.Info("restarting the control plane with the controller-manager's and scheduler's client limits raised", "qps", o.ComponentQPS)
	w.cp.SetComponentQPS(o.ComponentQPS)
	if err := w.cp.Restart(ctx, false); err != nil {
		return err
	}
	res.SchedComponentQPS = o.ComponentQPS
	// One pod bound: the scheduler's caches are filled again.
	if _, err := c.CoreV1().Pods(schedNamespace).Create(ctx, pod("warm", ""), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	if _, err := bound.wait(ctx, []string{"warm"}, o.Deadline); err != nil {
		return fmt.Errorf("after the restart: %w", err)
	}
	return round(" (limits raised)")
}

// scheduleKind creates k's pods and waits until the last is bound.
func scheduleKind(ctx context.Context, w *world, o Options, res *figures.Scale, bound *bindWatch, k podKind) error {
	c := w.c
	o.Logger.Info("scheduling", "kind", k.name, "pods", k.count)
	names := make([]string, k.count)
	for i := range names {
		names[i] = fmt.Sprintf("p%d-%s", len(res.SchedPodsPerSec), strconv.Itoa(i))
	}
	m0, err := scrape(ctx, c)
	if err != nil {
		return err
	}
	stop := profileKind(ctx, w, o, k.name)
	defer stop()
	cp0, _ := readProc(w.cp.PID())
	sim0, _ := readProc(os.Getpid())
	start := time.Now()
	err = parallel(ctx, 32, names, func(ctx context.Context, name string) error {
		_, err := c.CoreV1().Pods(schedNamespace).Create(ctx, pod(name, k.template), metav1.CreateOptions{})
		return err
	})
	if err != nil {
		return fmt.Errorf("creating %s pods: %w", k.name, err)
	}
	created := time.Since(start)
	last, err := bound.wait(ctx, names, o.Deadline)
	if err != nil {
		return fmt.Errorf("%s pods: %w", k.name, err)
	}
	took := last.Sub(start)
	cp1, _ := readProc(w.cp.PID())
	sim1, _ := readProc(os.Getpid())
	res.SchedCPCPUS[k.name], res.SchedSimCPUS[k.name] = (cp1.cpu - cp0.cpu).Seconds(), (sim1.cpu - sim0.cpu).Seconds()
	if m1, err := scrape(ctx, c); err == nil && m1.has("rest_client_rate_limiter_duration_seconds_sum") {
		res.SchedRateWaitS[k.name] = m1.one("rest_client_rate_limiter_duration_seconds_sum") - m0.one("rest_client_rate_limiter_duration_seconds_sum")
	}
	res.SchedPodsPerSec[k.name] = float64(k.count) / took.Seconds()
	res.SchedNote += fmt.Sprintf("%s: %d pods created in %.1f s, all bound after %.1f s; ", k.name, k.count, created.Seconds(), took.Seconds())
	return nil
}

func pod(name, template string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: schedNamespace}, Spec: corev1.PodSpec{
		NodeSelector: map[string]string{nodeLabel: "true"},
		Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")}}}},
	}}
	if template != "" {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "net"}}
	}
	return p
}

// bindWatch records when each pod of the namespace was first seen bound.
type bindWatch struct {
	mu    sync.Mutex
	bound map[string]time.Time
}

func newBindWatch(ctx context.Context, c kubernetes.Interface) *bindWatch {
	b := &bindWatch{bound: map[string]time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(schedNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = fields.Everything().String() }))
	inf := f.Core().V1().Pods().Informer()
	seen := func(o any) {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			b.mu.Lock()
			if _, ok := b.bound[p.Name]; !ok {
				b.bound[p.Name] = time.Now()
			}
			b.mu.Unlock()
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen, UpdateFunc: func(_, o any) { seen(o) }})
	f.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	return b
}

// wait returns when the last of names was bound.
func (b *bindWatch) wait(ctx context.Context, names []string, deadline time.Duration) (time.Time, error) {
	end := time.Now().Add(deadline)
	for {
		b.mu.Lock()
		var last time.Time
		n := 0
		for _, name := range names {
			if at, ok := b.bound[name]; ok {
				n++
				if at.After(last) {
					last = at
				}
			}
		}
		b.mu.Unlock()
		if n == len(names) {
			return last, nil
		}
		if time.Now().After(end) {
			return last, fmt.Errorf("%d of %d pods bound after %s", n, len(names), deadline)
		}
		select {
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
