package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// The churn: churnPods pods, each with a claim from one template, over
// churnDevices host veths in one pool, created in waves of churnWave.
const (
	churnPods    = 20
	churnDevices = 4
	churnWave    = 5
	churnIfName  = "net1"
	churnMTU     = 1400
	// churnTimeout bounds a whole churn; the 20 pods normally take well
	// under a minute.
	churnTimeout = 4 * time.Minute
)

// hostLink is a link as `ip -j link` shows it.
type hostLink struct {
	IfName  string   `json:"ifname"`
	Address string   `json:"address"`
	MTU     int      `json:"mtu"`
	Flags   []string `json:"flags"`
}

func (l hostLink) up() bool { return slices.Contains(l.Flags, "UP") }

// netnsLinks lists the links of a named network namespace.
func netnsLinks(ns string) ([]hostLink, error) {
	out, err := exec.Command("ip", "-n", ns, "-j", "link", "show").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, fmt.Errorf("ip -n %s link: %w: %s", ns, err, ee.Stderr)
		}
		return nil, fmt.Errorf("ip -n %s link: %w", ns, err)
	}
	var links []hostLink
	if err := json.Unmarshal(out, &links); err != nil {
		return nil, fmt.Errorf("ip -n %s -j link: %w", ns, err)
	}
	return links, nil
}

// churn is one churn run: a node with netdra and churnDevices devices, a
// namespace, a claim template, the pods' lifecycles and a monitor that
// checks the invariants all along.
type churn struct {
	t       *testing.T
	nn      *netdraNode
	c       kubernetes.Interface
	ns      string
	tmpl    string
	devices []string
	orig    map[string]hostLink // device -> as created in the host netns
	byMAC   map[string]string   // original MAC -> device

	// deletes is held (write-locked) to keep the pods from being deleted,
	// so that the ones running keep running across a disruption.
	deletes sync.RWMutex

	mu         sync.Mutex
	ran        map[string]string // pod -> device it was seen running with, in its netns
	uses       map[string]int    // device -> pods that ran with it
	violations []string
	rounds     int // monitor rounds that checked everything
	created    []types.UID
	netns      map[string]bool // of the sandboxes seen
	progress   chan struct{}
	nDev       int // devices in the pool
	// runtimeRestarts: containerd restarts during the run, and a pod
	// whose sandbox containerd does not list as ready for a moment after
	// its restart is not a broken invariant (its netns is checked then).
	runtimeRestarts bool
}

// startChurn starts netdra on a fresh node with churnDevices host veths in
// pool "net", a DeviceClass and a ResourceClaimTemplate naming the device
// net1 in the pod with an MTU of 1400, and waits for the pool to be
// published.
func startChurn(t *testing.T) *churn {
	t.Helper()
	return startChurnN(t, churnDevices)
}

// startChurnN is startChurn with n devices.
func startChurnN(t *testing.T, n int) *churn {
	t.Helper()
	return startChurnOpts(t, n, netdraOpts{})
}

// startChurnOpts is startChurnN with netdra started with o.
func startChurnOpts(t *testing.T, n int, o netdraOpts) *churn {
	t.Helper()
	ch := &churn{t: t, nDev: n, orig: map[string]hostLink{}, byMAC: map[string]string{}, ran: map[string]string{},
		uses: map[string]int{}, netns: map[string]bool{}, progress: make(chan struct{}, 1)}
	for i := range n {
		ch.devices = append(ch.devices, fmt.Sprintf("data%d", i))
	}
	ch.nn = startNetdraNode(t, o, ch.devices...)
	ch.c = ch.nn.cp.Client()
	names := make([]any, len(ch.devices))
	for i, d := range ch.devices {
		names[i] = d
	}
	ch.nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": names}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ch.ns = worldtest.Namespace(t, ch.c)
	ch.tmpl = claimTemplate(t, ch.c, ch.ns, deviceClass(t, ch.c, "net"), map[string]any{"podIfName": churnIfName, "mtu": churnMTU})
	links, err := netnsLinks(ch.nn.hostNS)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if slices.Contains(ch.devices, l.IfName) {
			ch.orig[l.IfName] = l
			ch.byMAC[l.Address] = l.IfName
		}
	}
	if len(ch.orig) != n || len(ch.byMAC) != n {
		t.Fatalf("host netns devices: %+v", links)
	}
	waitFor(t, "the pool to be published with every device", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, ch.c, ch.nn.node.Name())
		return err == nil && p["net"] == ch.nDev, nil
	})
	return ch
}

// violation records a broken invariant; the test fails at its end with
// every one of them.
func (ch *churn) violation(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	ch.mu.Lock()
	ch.violations = append(ch.violations, msg)
	ch.mu.Unlock()
	ch.t.Log("VIOLATION: " + msg)
}

// ranCount is how many pods have been seen running with their device.
func (ch *churn) ranCount() int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return len(ch.ran)
}

// waitRan blocks until n pods have run with their device or ctx ends.
func (ch *churn) waitRan(ctx context.Context, n int) error {
	for ch.ranCount() < n {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d pods to have run (%d did): %w", n, ch.ranCount(), ctx.Err())
		case <-ch.progress:
		}
	}
	return nil
}

// run churns churnPods pods in waves: wave k is created, all at once,
// when 3k pods have run; each pod is deleted shortly after it was seen
// running with its device, so the pending ones get devices as the others
// leave. The monitor checks the invariants meanwhile. disrupt runs in the
// test's goroutine during the churn. run returns once every pod is gone,
// then checks that nothing is left over.
func (ch *churn) run(disrupt func(ctx context.Context)) {
	t := ch.t
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), churnTimeout)
	defer cancel()
	monCtx, stopMonitor := context.WithCancel(ctx)
	var monitor sync.WaitGroup
	monitor.Go(func() { ch.monitor(monCtx) })

	var wg sync.WaitGroup
	errs := make(chan error, churnPods)
	wg.Go(func() {
		for w := 0; w*churnWave < churnPods; w++ {
			if err := ch.waitRan(ctx, 3*w); err != nil {
				errs <- err
				return
			}
			for i := w * churnWave; i < min((w+1)*churnWave, churnPods); i++ {
				wg.Go(func() {
					if err := ch.lifecycle(ctx, fmt.Sprintf("churn-%02d", i)); err != nil {
						errs <- err
					}
				})
			}
		}
	})
	if disrupt != nil {
		disrupt(ctx)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One more full round of checks on the final state, then stop.
	ch.mu.Lock()
	r := ch.rounds
	ch.mu.Unlock()
	for ctx.Err() == nil {
		ch.mu.Lock()
		done := ch.rounds >= r+2
		ch.mu.Unlock()
		if done {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	stopMonitor()
	monitor.Wait()
	ch.mu.Lock()
	t.Logf("churn of %d pods over %d devices took %s; pods per device %v; %d monitor rounds",
		churnPods, churnDevices, time.Since(t0).Round(time.Millisecond), ch.uses, ch.rounds)
	if len(ch.ran) != churnPods {
		t.Errorf("%d of %d pods ran with their device", len(ch.ran), churnPods)
	}
	for _, v := range ch.violations {
		t.Error(v)
	}
	ch.mu.Unlock()
	ch.checkNothingLeft()
}

// lifecycle creates the pod, waits until it runs, checks that its claim's
// device is in its netns as configured, and deletes it again.
func (ch *churn) lifecycle(ctx context.Context, name string) error {
	pod, err := ch.createPod(ctx, name)
	if err != nil {
		return err
	}
	ch.mu.Lock()
	ch.created = append(ch.created, pod.UID)
	ch.mu.Unlock()
	deleted := false
	defer func() {
		if !deleted { // a failed pod goes too, so the rest can be checked
			_ = ch.deletePod(ctx, pod)
		}
	}()
	var cur *corev1.Pod
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := ch.c.CoreV1().Pods(ch.ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil // the apiserver may be restarting
		}
		cur = p
		return containerRuns(p), nil
	})
	if err != nil {
		phase := corev1.PodPhase("unknown")
		if cur != nil {
			phase = cur.Status.Phase
		}
		return fmt.Errorf("pod %s never ran (phase %s): %w", name, phase, err)
	}
	dev, err := ch.verifyRunning(ctx, cur)
	if err != nil {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	ch.mu.Lock()
	ch.ran[name] = dev
	ch.uses[dev]++
	ch.mu.Unlock()
	select {
	case ch.progress <- struct{}{}:
	default:
	}
	time.Sleep(time.Duration(100+rand.IntN(300)) * time.Millisecond) // the pod's work
	ch.deletes.RLock()
	err = ch.deletePod(ctx, pod)
	ch.deletes.RUnlock()
	deleted = true
	return err
}

// createPod creates the pod, retrying while the apiserver is away.
func (ch *churn) createPod(ctx context.Context, name string) (*corev1.Pod, error) {
	want := podWithClaim(name, ch.nn.node.Name(), ch.tmpl)
	var pod *corev1.Pod
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		p, err := ch.c.CoreV1().Pods(ch.ns).Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // an earlier attempt went through
			p, err = ch.c.CoreV1().Pods(ch.ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			last = err
			return false, nil
		}
		pod = p
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("creating pod %s (last: %v): %w", name, last, err)
	}
	return pod, nil
}

// deletePod deletes the pod and waits until the node has torn it down and
// it is gone from the API.
func (ch *churn) deletePod(ctx context.Context, pod *corev1.Pod) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		err := ch.c.CoreV1().Pods(ch.ns).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(pod.UID))})
		if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
			return true, nil
		}
		last = err
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("deleting pod %s (last: %v): %w", pod.Name, last, err)
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := ch.c.CoreV1().Pods(ch.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s is not gone: %w", pod.Name, err)
	}
	return nil
}

// claimDevice returns the device allocated to the pod's claim.
func (ch *churn) claimDevice(ctx context.Context, pod *corev1.Pod) (string, error) {
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return "", fmt.Errorf("pod %s has no claim in its status: %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	}
	name := *pod.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := ch.c.ResourceV1().ResourceClaims(ch.ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("claim %s of pod %s: %w", name, pod.Name, err)
	}
	return allocatedDevice(claim)
}

func allocatedDevice(claim *resourceapi.ResourceClaim) (string, error) {
	if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 {
		return "", fmt.Errorf("claim %s is not allocated one device: %+v", claim.Name, claim.Status.Allocation)
	}
	return claim.Status.Allocation.Devices.Results[0].Device, nil
}

// verifyRunning checks a pod the API shows running: its claim's device is
// in its netns, named net1 with the claim's MTU and the device's own MAC.
// It returns the device.
func (ch *churn) verifyRunning(ctx context.Context, pod *corev1.Pod) (string, error) {
	var dev string
	err := retryAPI(ctx, func(ctx context.Context) error {
		var err error
		dev, err = ch.claimDevice(ctx, pod)
		return err
	})
	if err != nil {
		return "", err
	}
	netns, ok := ch.nn.node.Sandbox(pod.UID)
	if !ok {
		return "", fmt.Errorf("runs without a sandbox on the node")
	}
	ch.mu.Lock()
	ch.netns[netns] = true
	ch.mu.Unlock()
	links, err := netnsLinks(netns)
	if err != nil {
		return "", err
	}
	for _, l := range links {
		if ch.byMAC[l.Address] == dev {
			if l.IfName != churnIfName || l.MTU != churnMTU || !l.up() {
				return "", fmt.Errorf("device %s is in netns %s as %+v, want %s, MTU %d, up", dev, netns, l, churnIfName, churnMTU)
			}
			return dev, ch.startedWithDevice(ctx, pod, dev)
		}
	}
	return "", fmt.Errorf("runs without its device %s (MAC %s) in its netns %s: %+v", dev, ch.orig[dev].Address, netns, links)
}

// startedWithDevice checks, from inside the pod's container, that it had
// the device from its first moment: the test app's first dump of its
// network shows net1 up with the claim's MTU and the device's MAC.
func (ch *churn) startedWithDevice(ctx context.Context, pod *corev1.Pod, dev string) error {
	var view string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		log, err := ch.nn.node.ContainerLog(pod.Namespace, pod.Name, pod.UID, "app", 0)
		if i := strings.Index(log, "testapp end 1\n"); err == nil && i >= 0 {
			view = log[:i]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		return fmt.Errorf("no first dump from the container: %w", err)
	}
	want := fmt.Sprintf(": %s: <up", churnIfName)
	for _, line := range strings.Split(view, "\n") {
		if strings.Contains(line, want) && strings.Contains(line, fmt.Sprintf("mtu %d hw %s", churnMTU, ch.orig[dev].Address)) {
			return nil
		}
	}
	return fmt.Errorf("its container started without %s (device %s): it saw\n%s", churnIfName, dev, view)
}

// retryAPI calls f until it succeeds, for API reads that fail while the
// apiserver restarts; the last error is returned when ctx ends.
func retryAPI(ctx context.Context, f func(context.Context) error) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// monitor checks the invariants over and over until ctx ends.
func (ch *churn) monitor(ctx context.Context) {
	for ctx.Err() == nil {
		if ch.checkOnce(ctx) {
			ch.mu.Lock()
			ch.rounds++
			ch.mu.Unlock()
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkOnce checks, on one snapshot: no device is allocated twice, in the
// state service or in the claims; no device is in two pod netns, nor in
// the netns of a pod whose claim has another; every pod the API shows
// running, and not being deleted, has its claim's device in its netns. It
// reports whether every source answered (a process or the apiserver may
// be restarting).
func (ch *churn) checkOnce(ctx context.Context) bool {
	complete := true
	callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if resp, err := ch.nn.stateClient.ListAllocations(callCtx, &statev1.ListAllocationsRequest{}); err == nil {
		seen := map[string]string{}
		for _, a := range resp.GetAllocations() {
			if other, ok := seen[a.GetDeviceName()]; ok {
				ch.violation("device %s has two allocations in the state service: claims %s and %s", a.GetDeviceName(), other, a.GetClaimName())
			}
			seen[a.GetDeviceName()] = a.GetClaimName()
		}
	} else {
		complete = false
	}
	// The claims before the pods: a running pod's claim is older than
	// its Running status.
	claims, err := ch.c.ResourceV1().ResourceClaims(ch.ns).List(callCtx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	deviceOf := map[string]string{} // claim -> device
	owner := map[string]string{}    // device -> claim
	for i := range claims.Items {
		cl := &claims.Items[i]
		if cl.Status.Allocation == nil {
			continue
		}
		for _, r := range cl.Status.Allocation.Devices.Results {
			if other, ok := owner[r.Device]; ok {
				ch.violation("device %s is allocated to two claims at once: %s and %s", r.Device, other, cl.Name)
			}
			owner[r.Device] = cl.Name
			deviceOf[cl.Name] = r.Device
		}
	}
	pods, err := ch.c.CoreV1().Pods(ch.ns).List(callCtx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	inNetns := map[string]string{} // device -> pod whose netns holds it
	for i := range pods.Items {
		pod := &pods.Items[i]
		netns, ok := ch.nn.node.Sandbox(pod.UID)
		running := containerRuns(pod) && pod.DeletionTimestamp == nil
		if !ok {
			if running && !ch.runtimeRestarts {
				ch.confirm(ctx, pod, "runs with no sandbox on the node")
			}
			continue
		}
		links, err := netnsLinks(netns)
		if err != nil {
			if running {
				ch.confirm(ctx, pod, fmt.Sprintf("its netns cannot be read: %v", err))
			}
			continue
		}
		want := ""
		if len(pod.Status.ResourceClaimStatuses) == 1 && pod.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
			want = deviceOf[*pod.Status.ResourceClaimStatuses[0].ResourceClaimName]
		}
		has := false
		for _, l := range links {
			dev, ours := ch.byMAC[l.Address]
			if !ours {
				continue
			}
			if other, ok := inNetns[dev]; ok {
				ch.violation("device %s is in the netns of two pods: %s and %s", dev, other, pod.Name)
			}
			inNetns[dev] = pod.Name
			if dev == want {
				has = true
			} else {
				ch.violation("device %s is in the netns of pod %s, whose claim has %q", dev, pod.Name, want)
			}
		}
		if running && !has {
			ch.confirm(ctx, pod, fmt.Sprintf("its device %q is not in its netns %s", want, netns))
		}
	}
	return complete
}

// containerRuns reports whether a container of pod runs. The pod's phase
// is no such sign: with restartPolicy Always a pod is Running as soon as a
// container of it was created, even when every start since was refused
// (by the netns hook, for one: runc created the container, its
// createRuntime hook failed).
func containerRuns(pod *corev1.Pod) bool {
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.State.Running != nil {
			return true
		}
	}
	return false
}

// confirm records a violation for a pod seen running without its device,
// if the pod is still running, not being deleted, and the same pod: a pod
// that is being deleted gives its device back first.
func (ch *churn) confirm(ctx context.Context, seen *corev1.Pod, what string) {
	var pod *corev1.Pod
	err := retryAPI(ctx, func(ctx context.Context) error {
		p, err := ch.c.CoreV1().Pods(ch.ns).Get(ctx, seen.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		pod = p
		return err
	})
	if err != nil || pod == nil || pod.UID != seen.UID || pod.DeletionTimestamp != nil || !containerRuns(pod) {
		return
	}
	ch.violation("pod %s (%s) is running but %s", seen.Name, seen.UID, what)
}

// checkNothingLeft waits for the end state after the churn: no claim, no
// allocation, every device back in the host netns with its name, MAC, MTU
// and up state, published again, and no pod netns left.
func (ch *churn) checkNothingLeft() {
	t := ch.t
	t.Helper()
	waitFor(t, "the claims to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		l, err := ch.c.ResourceV1().ResourceClaims(ch.ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(l.Items) == 0, nil
	})
	var left []*statev1.Allocation
	waitFor(t, "the allocations to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := ch.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		left = resp.GetAllocations()
		return err == nil && len(left) == 0, nil
	})
	links, err := netnsLinks(ch.nn.hostNS)
	if err != nil {
		t.Fatal(err)
	}
	back := map[string]hostLink{}
	for _, l := range links {
		if dev, ok := ch.byMAC[l.Address]; ok {
			back[dev] = l
		}
	}
	for _, dev := range ch.devices {
		got, ok := back[dev]
		want := ch.orig[dev]
		switch {
		case !ok:
			t.Errorf("device %s (MAC %s) is not back in the host netns: %+v", dev, want.Address, links)
		case got.IfName != want.IfName || got.MTU != want.MTU || got.up() != want.up():
			t.Errorf("device %s is back as %+v, want %+v", dev, got, want)
		}
	}
	waitFor(t, "every device to be published again", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, ch.c, ch.nn.node.Name())
		return err == nil && p["net"] == ch.nDev, nil
	})
	// The sandboxes' network namespaces went with them.
	ch.mu.Lock()
	defer ch.mu.Unlock()
	var netnsLeft []string
	for ns := range ch.netns {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			netnsLeft = append(netnsLeft, ns)
		}
	}
	if len(netnsLeft) > 0 {
		t.Errorf("pod netns left: %v", netnsLeft)
	}
}

// TestE2E_Churn: 20 pods churned concurrently over 4 devices. Pending pods
// get devices as the others leave; no device is ever allocated twice or in
// two pods; every pod runs with its device; at the end the devices are
// all back in the host as they were, with no allocation and no claim left.
func TestE2E_Churn(t *testing.T) {
	ch := startChurn(t)
	ch.run(nil)
}

// TestE2E_ChurnKill9: during the churn each node process in turn is killed
// with SIGKILL and started again, after a few more pods have run each
// time: the provisioner, the state service and dra in the middle of a
// prepare (while the state service holds an intent), the NRI plugin while
// a pod runs on every device and none is deleted (see nriKill). The system
// converges: every pod runs with its device, none runs without it, and
// nothing leaks.
func TestE2E_ChurnKill9(t *testing.T) {
	ch := startChurn(t)
	ch.run(func(ctx context.Context) {
		for i, p := range []struct {
			name string
			proc interface{ Restart() }
		}{{"provisioner", ch.nn.prov}, {"state", ch.nn.state}, {"dra", ch.nn.dra}} {
			if err := ch.waitRan(ctx, 3+4*i); err != nil {
				t.Errorf("before killing %s: %v", p.name, err)
				return
			}
			found := ch.waitPhase(ctx, statev1.Phase_PHASE_PREPARING)
			t.Logf("kill -9 %s (%d pods ran; mid-prepare: %v)", p.name, ch.ranCount(), found)
			p.proc.Restart()
		}
		if err := ch.waitRan(ctx, 15); err != nil {
			t.Errorf("before killing nri: %v", err)
			return
		}
		ch.nriKill(ctx)
	})
}

// nriKill kills the NRI plugin while a pod runs on every device and no pod
// is being deleted, so that no sandbox starts or stops while it is away,
// and restarts it. The running pods keep their devices, and once the
// plugin has synchronized with the runtime again the churn goes on: the
// pods are stopped through the new plugin, which learned their netns from
// the runtime.
//
// The plugin is not killed in the middle of a sandbox event: a sandbox the
// runtime starts or stops while no NRI plugin answers (killed during the
// hook, or not connected yet) loses its device with its netns when the
// runtime removes it (a veth is destroyed with it; a NIC goes back to the
// init netns under its pod name), and a sandbox started meanwhile runs
// without its device until the plugin is back. NRI does not let a plugin
// hold sandboxes up; closing this needs the provisioner to keep the pod
// netns of an attached device alive (an open handle) and to detach from it
// when the netns path is gone. Not done yet.
func (ch *churn) nriKill(ctx context.Context) {
	t := ch.t
	ch.deletes.Lock()
	defer ch.deletes.Unlock()
	var running map[types.UID]string
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		running = ch.runningWithDevice(ctx)
		return len(running) == churnDevices, nil
	})
	if err != nil {
		t.Errorf("waiting for a pod on every device before killing nri (%d): %v", len(running), err)
		return
	}
	synced := strings.Count(ch.nn.nriP.Log(), `"msg":"Synchronized"`)
	t.Logf("kill -9 nri (%d pods ran; %d run, one on every device)", ch.ranCount(), len(running))
	ch.nn.nriP.Restart()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		return strings.Count(ch.nn.nriP.Log(), `"msg":"Synchronized"`) > synced, nil
	})
	if err != nil {
		t.Errorf("the NRI plugin did not synchronize with the runtime again: %v", err)
	}
	for uid, dev := range running {
		if err := ch.stillHas(uid, dev); err != nil {
			t.Errorf("after the NRI plugin restarted: %v", err)
		}
	}
}

// waitPhase polls the state service until an allocation is in phase, for
// at most 10 seconds, and reports whether one was.
func (ch *churn) waitPhase(ctx context.Context, phase statev1.Phase) bool {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		resp, err := ch.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{Phase: phase})
		if err == nil && len(resp.GetAllocations()) > 0 {
			return true
		}
		time.Sleep(2 * time.Millisecond)
	}
	return false
}

// TestE2E_ChurnApiserverRestart: the control plane (etcd, apiserver,
// controller-manager, scheduler) is restarted mid-churn while pods hold
// devices; those pods keep their devices in their netns throughout, and
// the churn completes.
func TestE2E_ChurnApiserverRestart(t *testing.T) {
	ch := startChurn(t)
	ch.run(func(ctx context.Context) {
		if err := ch.waitRan(ctx, 6); err != nil {
			t.Error(err)
			return
		}
		ch.deletes.Lock() // the pods running now stay, and the pending ones fill every device
		defer ch.deletes.Unlock()
		var running map[types.UID]string
		err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
			running = ch.runningWithDevice(ctx)
			return len(running) == churnDevices, nil
		})
		if err != nil {
			t.Errorf("waiting for a pod on every device (%d): %v", len(running), err)
			return
		}
		t.Logf("restarting the control plane with %d pods running: %v", len(running), running)
		if err := ch.nn.cp.Restart(ctx, false); err != nil {
			t.Errorf("restarting the control plane: %v", err)
			return
		}
		for uid, dev := range running {
			if err := ch.stillHas(uid, dev); err != nil {
				t.Errorf("after the restart: %v", err)
			}
		}
	})
}

// runningWithDevice returns the pods that run now, each with the device it
// was checked to have in its netns.
func (ch *churn) runningWithDevice(ctx context.Context) map[types.UID]string {
	out := map[types.UID]string{}
	var pods *corev1.PodList
	if err := retryAPI(ctx, func(ctx context.Context) (err error) {
		pods, err = ch.c.CoreV1().Pods(ch.ns).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		ch.t.Error(err)
		return out
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if !containerRuns(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		dev, err := ch.verifyRunning(ctx, pod)
		if err != nil {
			ch.violation("pod %s: %v", pod.Name, err)
			continue
		}
		out[pod.UID] = dev
	}
	return out
}

// stillHas checks, on the node alone, that the pod's sandbox still holds
// the device.
func (ch *churn) stillHas(uid types.UID, dev string) error {
	netns, ok := ch.nn.node.Sandbox(uid)
	if !ok {
		return fmt.Errorf("pod %s lost its sandbox", uid)
	}
	links, err := netnsLinks(netns)
	if err != nil {
		return err
	}
	for _, l := range links {
		if ch.byMAC[l.Address] == dev && l.IfName == churnIfName {
			return nil
		}
	}
	return fmt.Errorf("pod %s lost its device %s: netns %s has %+v", uid, dev, netns, links)
}
