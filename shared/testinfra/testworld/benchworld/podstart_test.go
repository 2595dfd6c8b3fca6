package benchworld

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// startupPods is how many pods each phase of BenchmarkWorld_PodStartup
// starts (at once, and one after the other);
// $NETDRA_BENCH_STARTUP_PODS sets another number, for a quick look.
var startupPods = 100

func init() {
	if n, err := strconv.Atoi(os.Getenv("NETDRA_BENCH_STARTUP_PODS")); err == nil && n > 0 {
		startupPods = n
	}
}

// BenchmarkWorld_PodStartup measures what netdra adds to a pod's start on
// the real node (a real kubelet, containerd with NRI and runc): pods are
// created one after the other (each when the one before is Ready) and
// all at once, each with a netdra claim (a host veth, a pod interface
// name) and without (the same pod spec otherwise), and each pod's time
// from its create request to its Ready condition is recorded; the pods
// of a phase are deleted, and their devices back, before the next. netdra
// runs as installed (the netns hook on, its metrics served): the mean
// time of nri's hooks and dra's prepare in each phase say where the time
// goes. Then the kubelet restarts (BenchmarkWorld_PodStartup's "restart"
// record): slices back and a new pod with a claim Running.
func BenchmarkWorld_PodStartup(b *testing.B) {
	w := startStartupWorld(b)
	// One pod of each kind first, unmeasured: the node's first pods pay
	// for the image's first unpack and the CNI's first run.
	w.phase(b, "warm", false, false, 1)
	w.phase(b, "warm", true, false, 1)
	for _, burst := range []bool{false, true} {
		for _, claim := range []bool{false, true} {
			w.record(b, w.phase(b, "", claim, burst, startupPods))
		}
	}
	w.burstLimitsRaised(b)
	w.kubeletRestart(b)
}

// raisedQPS is the controller-manager's and the scheduler's apiserver
// client rate (burst twice that) of the burst run again with their limits
// raised: scheduler_perf's.
const raisedQPS = 5000

// burstLimitsRaised runs the burst, without a claim and with one, again
// with the control plane's client limits raised (way "burst-raised"),
// then restarts the control plane with its defaults: what a claim adds to
// a burst when the claims made from the template and the scheduler's
// writes do not wait on their clients' rate limiters, which every driver's
// pods meet alike. One unmeasured pod with a claim runs first, after the
// restart: the scheduler's and the controller-manager's caches filled.
func (w *startupWorld) burstLimitsRaised(b *testing.B) {
	b.Helper()
	restart := func(qps float64) {
		w.nn.cp.SetComponentQPS(qps)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := w.nn.cp.Restart(ctx, false); err != nil {
			b.Fatalf("restarting the control plane with its client rate at %v: %v", qps, err)
		}
	}
	restart(raisedQPS)
	w.phase(b, "warm-raised-", true, false, 1)
	for _, claim := range []bool{false, true} {
		rec := w.phase(b, "raised-", claim, true, startupPods)
		rec.Way, rec.ComponentQPS = "burst-raised", raisedQPS
		w.record(b, rec)
	}
	restart(0)
}

// startupWorld is the node of the pod benchmarks (BenchmarkWorld_PodStartup,
// BenchmarkWorld_PodBesideDevicePods): netdra with host veths in one pool,
// a claim template, an informer on the pods of the namespace.
type startupWorld struct {
	nn             *netdraNode
	c              kubernetes.Interface
	ns, tmpl       string
	nriMet, draMet string
	ready          *readyClock
}

// startStartupWorld is BenchmarkWorld_PodStartup's node: startupPods host
// veths, a claim template for one of them.
func startStartupWorld(b *testing.B) *startupWorld {
	return startPodWorld(b, startupPods, "bench-podstart-net", func(c kubernetes.Interface, ns, class string) string {
		return worldtest.ClaimTemplate(b, c, ns, class, map[string]any{"podIfName": "net1", "mtu": 1400})
	})
}

// startPodWorld starts the node of a pod benchmark: netdra with that many
// host veths (ps0, ps1, ...) in the pool "net", the DeviceClass class
// selecting it, the claim template that template makes in the namespace,
// and an informer on the namespace's pods; the node is drained at the end.
func startPodWorld(b *testing.B, veths int, class string, template func(c kubernetes.Interface, ns, class string) string) *startupWorld {
	w := &startupWorld{nriMet: testenv.FreeAddr(b), draMet: testenv.FreeAddr(b)}
	w.nn = startNetdraOpts(b, netdraOpts{nriMetrics: w.nriMet, draMetrics: w.draMet, netnsHook: true})
	var batch strings.Builder
	for i := range veths {
		name := fmt.Sprintf("ps%d", i)
		fmt.Fprintf(&batch, "link add %s address 02:00:00:0c:%02x:%02x mtu 1500 type veth peer name p-%s\n", name, i/256, i%256, name)
	}
	cmd := exec.Command("ip", "-n", w.nn.hostNS, "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("ip -batch: %v: %s", err, out)
	}
	w.nn.applyNodeConfig(b, map[string]any{
		// A glob: the NodeConfig holds at most 64 names.
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"ps*"}}},
		"pools":                []any{map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}}},
	})
	w.c = w.nn.cp.Client()
	waitDevices(b, w.c, w.nn.node.Name(), "net", veths)
	w.ns = worldtest.Namespace(b, w.c)
	w.tmpl = template(w.c, w.ns, worldtest.DeviceClass(b, w.c, class, "net"))
	w.ready = watchReady(b, w.c, w.ns)
	// Registered after the node, run before its teardown: the pods go
	// through the real StopPodSandbox and unprepare while netdra runs.
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		w.nn.node.Drain(ctx)
	})
	return w
}

// phase starts n pods (with a claim or not, one after the other or all at
// once), waits for each to be Ready, then deletes them and waits until
// they and their claims are gone; it returns the phase's figures (netdra's
// calls over the start and the teardown).
func (w *startupWorld) phase(b *testing.B, prefix string, claim, burst bool, n int) figures.PodStart {
	b.Helper()
	way := map[bool]string{false: "serial", true: "burst"}[burst]
	name := fmt.Sprintf("%s%s-%s", prefix, way, map[bool]string{false: "plain", true: "claim"}[claim])
	before := w.hookTimes(b)
	start := time.Now()
	var mu sync.Mutex
	var took, bound, sandbox, created, started []time.Duration
	failures, noStages := 0, 0
	one := func(i int) {
		st, err := w.startPod(fmt.Sprintf("%s-%d", name, i), claim)
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			if failures == 0 {
				b.Logf("%s: %v", name, err)
			}
			failures++
			return
		}
		took, bound = append(took, st.ready), append(bound, st.scheduled)
		if st.stagesErr != nil {
			if noStages == 0 {
				b.Logf("%s: %v", name, st.stagesErr)
			}
			noStages++
			return
		}
		sandbox, created, started = append(sandbox, st.sandbox), append(created, st.created), append(started, st.started)
	}
	var wg sync.WaitGroup
	for i := range n {
		if !burst {
			one(i)
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); one(i) }()
	}
	wg.Wait()
	rec := figures.PodStart{Way: way, Claim: claim, Pods: n, Failures: failures, Ready: figures.Summarize(took),
		Scheduled: figures.Summarize(bound), Sandbox: figures.Summarize(sandbox), ContainerCreated: figures.Summarize(created),
		ContainerStarted: figures.Summarize(started), WallSeconds: time.Since(start).Seconds()}
	w.deleteAll(b)
	rec.Hooks = meanDelta(before, w.hookTimes(b)) // the pods' start and their teardown
	b.Logf("%s: %d pods, ready p50 %.0f ms p90 %.0f ms p99 %.0f ms (scheduled p50 %.0f ms), %d failed; netdra (mean ms): %v", name, n,
		rec.Ready.P50, rec.Ready.P90, rec.Ready.P99, rec.Scheduled.P50, failures, rec.Hooks)
	return rec
}

func (w *startupWorld) record(b *testing.B, rec figures.PodStart) {
	b.Helper()
	if err := figures.Record(figures.PodStartFile, rec); err != nil {
		b.Fatal(err)
	}
}

// startTimes is a pod's start, each stage from its create request: bound
// to the node (the scheduler's share, before the kubelet sees the pod),
// its sandbox made and its container made and started (containerd's
// clock, the CRI's: the kubelet's and netdra's share on the node), its
// Ready condition seen (the kubelet's status after its next look at the
// runtime). stagesErr says why the runtime's stages are missing.
type startTimes struct {
	scheduled, sandbox, created, started, ready time.Duration
	stagesErr                                   error
}

// startPod creates a pod and returns its stages' times.
func (w *startupWorld) startPod(name string, claim bool) (st startTimes, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	seen, bound := w.ready.expect(name), w.ready.expect(scheduledKey(name))
	t0 := time.Now()
	pod, err := w.c.CoreV1().Pods(w.ns).Create(ctx, startupPod(name, w.nn.node.Name(), w.tmpl, claim), metav1.CreateOptions{})
	if err != nil {
		return st, fmt.Errorf("creating pod %s: %w", name, err)
	}
	wait := func(ch <-chan time.Time, what string) (time.Duration, error) {
		select {
		case t := <-ch:
			return t.Sub(t0), nil
		case <-ctx.Done():
			return 0, fmt.Errorf("pod %s not %s in 5 min", name, what)
		}
	}
	if st.scheduled, err = wait(bound, "bound to the node"); err != nil {
		return st, err
	}
	if st.ready, err = wait(seen, "Ready"); err != nil {
		return st, err
	}
	pt, err := w.nn.node.PodTimes(ctx, pod.UID, "app")
	if err != nil {
		st.stagesErr = fmt.Errorf("pod %s: %w", name, err)
		return st, nil
	}
	st.sandbox, st.created, st.started = pt.SandboxCreated.Sub(t0), pt.ContainerCreated.Sub(t0), pt.ContainerStarted.Sub(t0)
	return st, nil
}

// startupPod is the benchmark's pod: the e2e tests' pod (the test app,
// netdra required by NRI's validator), with a claim from template or
// without one.
func startupPod(name, node, template string, claim bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"bench": "podstart"},
		Annotations: map[string]string{realnode.RequiredPluginsAnnotation: `["netdra"]`}}, Spec: corev1.PodSpec{
		NodeSelector:                  map[string]string{corev1.LabelHostname: node},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Containers:                    []corev1.Container{{Name: "app", Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever}},
	}}
	if claim {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &template}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "net"}}
	}
	return p
}

// deleteAll deletes the namespace's pods and waits until they and their
// claims are gone (the devices free for the next phase).
func (w *startupWorld) deleteAll(b *testing.B) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := w.c.CoreV1().Pods(w.ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		b.Fatal(err)
	}
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		pods, err := w.c.CoreV1().Pods(w.ns).List(ctx, metav1.ListOptions{})
		if err != nil || len(pods.Items) > 0 {
			return false, nil
		}
		claims, err := w.c.ResourceV1().ResourceClaims(w.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(claims.Items) == 0, nil
	})
	if err != nil {
		b.Fatalf("waiting for the pods and claims to be gone: %v", err)
	}
}

// readyClock records when the informer first sees a pod Ready (or
// Running, expectRunning) for those expected.
type readyClock struct {
	mu      sync.Mutex
	waiters map[string]chan time.Time
}

// watchReady starts an informer on the pods of ns, stopped at the end.
func watchReady(b *testing.B, c kubernetes.Interface, ns string) *readyClock {
	rc := &readyClock{waiters: map[string]chan time.Time{}}
	f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	seen := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			rc.seen(p, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: seen,
		UpdateFunc: func(_, obj any) { seen(obj) }}); err != nil {
		b.Fatal(err)
	}
	stop := make(chan struct{})
	f.Start(stop)
	b.Cleanup(func() { close(stop); f.Shutdown() })
	if !cache.WaitForCacheSync(stop, inf.HasSynced) {
		b.Fatal("the pod informer did not sync")
	}
	return rc
}

// expect returns the channel that gets the time pod name is first Ready.
func (rc *readyClock) expect(name string) <-chan time.Time {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	ch := make(chan time.Time, 1)
	rc.waiters[name] = ch
	return ch
}

func (rc *readyClock) fire(name string, t time.Time) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if ch, ok := rc.waiters[name]; ok {
		ch <- t
		delete(rc.waiters, name)
	}
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
