package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/shared/testworld/node"
	"github.com/netdra/netdra/shared/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }

// world is one test's node with a DRA driver and an NRI plugin on it.
type world struct {
	client  kubernetes.Interface
	node    *node.Node
	ns      string
	driver  *testDriver
	plugin  *testPlugin
	journal *journal
}

func newWorld(t *testing.T) *world {
	t.Helper()
	cp := worldtest.ControlPlane(t)
	w := &world{client: cp.Client(), journal: &journal{}}
	w.node = worldtest.Node(t, cp)
	w.ns = worldtest.Namespace(t, w.client)
	w.driver = startDriver(t, w.client, w.node, w.journal)
	w.plugin = startPlugin(t, w.node, w.journal)
	ctx := context.Background()
	class := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: w.driver.name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", w.driver.name)},
		}}},
	}
	if _, err := w.client.ResourceV1().DeviceClasses().Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating DeviceClass: %v", err)
	}
	t.Cleanup(func() {
		_ = w.client.ResourceV1().DeviceClasses().Delete(context.Background(), class.Name, metav1.DeleteOptions{})
	})
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: "one-device", Namespace: w.ns},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class.Name}}},
		}}},
	}
	if _, err := w.client.ResourceV1().ResourceClaimTemplates(w.ns).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating ResourceClaimTemplate: %v", err)
	}
	return w
}

// createPod creates a pod pinned to the world's node by node selector (the
// scheduler still picks it), with a claim from the template unless
// hostNetwork.
func (w *world) createPod(t *testing.T, name string, hostNetwork bool) *corev1.Pod {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeSelector:                  map[string]string{corev1.LabelHostname: w.node.Name()},
			HostNetwork:                   hostNetwork,
			TerminationGracePeriodSeconds: ptr.To[int64](30),
			Containers:                    []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if !hostNetwork {
		pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "dev", ResourceClaimTemplateName: ptr.To("one-device")}}
		pod.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "dev"}}
	}
	pod, err := w.client.CoreV1().Pods(w.ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod: %v", err)
	}
	return pod
}

func (w *world) getPod(t *testing.T, name string) (*corev1.Pod, bool) {
	t.Helper()
	pod, err := w.client.CoreV1().Pods(w.ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	if err != nil {
		t.Fatalf("getting pod: %v", err)
	}
	return pod, true
}

func (w *world) waitRunning(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	poll(t, "pod "+name+" Running and Ready", func() bool {
		p, ok := w.getPod(t, name)
		pod = p
		return ok && p.Status.Phase == corev1.PodRunning && ready(p)
	})
	return pod
}

func ready(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// waitEvent waits for a Warning event with reason on the pod and returns
// its message.
func (w *world) waitEvent(t *testing.T, pod *corev1.Pod, reason string) string {
	t.Helper()
	var msg string
	sel := fields.Set{"involvedObject.uid": string(pod.UID), "reason": reason}.AsSelector().String()
	poll(t, "event "+reason, func() bool {
		evs, err := w.client.CoreV1().Events(w.ns).List(context.Background(), metav1.ListOptions{FieldSelector: sel})
		if err != nil || len(evs.Items) == 0 {
			return false
		}
		msg = evs.Items[0].Message
		return evs.Items[0].Type == corev1.EventTypeWarning && evs.Items[0].Source.Component == "kubelet"
	})
	return msg
}

func (w *world) deleteAndWaitGone(t *testing.T, name string) {
	t.Helper()
	if err := w.client.CoreV1().Pods(w.ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("deleting pod: %v", err)
	}
	poll(t, "pod "+name+" gone", func() bool { _, ok := w.getPod(t, name); return !ok })
}

// netnsListed reports whether `ip netns list` shows name; without the ip
// command it looks at the bind mount the listing reads.
func netnsListed(t *testing.T, name string) bool {
	t.Helper()
	if _, err := exec.LookPath("ip"); err != nil {
		_, err := os.Stat(filepath.Join(node.NetnsDir, name))
		return err == nil
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

func generatedClaim(t *testing.T, pod *corev1.Pod) string {
	t.Helper()
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == "dev" && s.ResourceClaimName != nil {
			return *s.ResourceClaimName
		}
	}
	t.Fatalf("pod %s has no generated claim in its status: %+v", pod.Name, pod.Status.ResourceClaimStatuses)
	return ""
}

// TestPodLifecycle walks a pod through the whole world: the generated
// claim, its allocation by the scheduler, prepare, the sandbox with its
// network namespace, Running; then on deletion StopPodSandbox,
// RemovePodSandbox and unprepare in that order, the namespace and the pod
// gone.
func TestPodLifecycle(t *testing.T) {
	tests := []struct {
		name        string
		hostNetwork bool
	}{
		{name: "claim from template"},
		{name: "host network without claims", hostNetwork: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			created := w.createPod(t, "pod", tt.hostNetwork)
			pod := w.waitRunning(t, "pod")
			if pod.Spec.NodeName != w.node.Name() {
				t.Fatalf("pod bound to %q, want %q", pod.Spec.NodeName, w.node.Name())
			}
			if got := len(pod.Status.ContainerStatuses); got != 1 || pod.Status.ContainerStatuses[0].State.Running == nil {
				t.Errorf("container statuses %+v, want one running", pod.Status.ContainerStatuses)
			}
			netns, ok := w.node.Sandbox(created.UID)
			if !ok {
				t.Fatal("node reports no sandbox for a running pod")
			}
			uid := string(created.UID)

			var claimLine string
			if tt.hostNetwork {
				if netns != "" {
					t.Errorf("hostNetwork pod got netns %q", netns)
				}
				if want := fmt.Sprintf("RunPodSandbox %s  exists=false", uid); w.journal.index(want) < 0 {
					t.Errorf("journal %q lacks %q", w.journal.all(), want)
				}
			} else {
				claim, err := w.client.ResourceV1().ResourceClaims(w.ns).Get(context.Background(), generatedClaim(t, pod), metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if claim.Status.Allocation == nil || len(claim.Status.Allocation.Devices.Results) != 1 ||
					claim.Status.Allocation.Devices.Results[0].Driver != w.driver.name {
					t.Fatalf("claim allocation %+v, want one device of %s", claim.Status.Allocation, w.driver.name)
				}
				claimLine = fmt.Sprintf("prepare %s/%s %s", claim.Namespace, claim.Name, claim.UID)
				path := filepath.Join(node.NetnsDir, netns)
				run := fmt.Sprintf("RunPodSandbox %s %s exists=true", uid, path)
				if p, r := w.journal.index(claimLine), w.journal.index(run); p < 0 || r < 0 || p > r {
					t.Fatalf("journal %q: want %q, then %q", w.journal.all(), claimLine, run)
				}
				if !netnsListed(t, netns) {
					t.Errorf("ip netns list does not show %s", netns)
				}
				if !w.node.Prepared(claim.UID) {
					t.Errorf("node does not report claim %s prepared", claim.Name)
				}
			}

			w.deleteAndWaitGone(t, "pod")
			stop, remove := w.journal.index("StopPodSandbox "+uid), w.journal.index("RemovePodSandbox "+uid)
			if stop < 0 || remove < stop {
				t.Errorf("journal %q: want StopPodSandbox then RemovePodSandbox", w.journal.all())
			}
			if !tt.hostNetwork {
				unprepare := w.journal.index("un" + claimLine)
				if unprepare < remove {
					t.Errorf("journal %q: want unprepare after RemovePodSandbox", w.journal.all())
				}
				if netnsListed(t, netns) {
					t.Errorf("netns %s still listed after the pod is gone", netns)
				}
			}
			if _, ok := w.node.Sandbox(created.UID); ok {
				t.Error("node still reports a sandbox for the deleted pod")
			}
		})
	}
}

// TestFailuresAreRetried makes prepare or RunPodSandbox fail once: the pod
// stays Pending with the kubelet's Warning event holding the error, and the
// retry brings it up. A retried sandbox reuses the netns name, so a
// namespace left behind by the failed attempt would fail the retry.
func TestFailuresAreRetried(t *testing.T) {
	tests := []struct {
		name     string
		inject   func(*world)
		reason   string
		wantRuns int // RunPodSandbox calls before Running
	}{
		{
			name:     "prepare",
			inject:   func(w *world) { w.driver.failPrepares.Store(1) },
			reason:   node.ReasonFailedPrepare,
			wantRuns: 1,
		},
		{
			name:     "RunPodSandbox",
			inject:   func(w *world) { w.plugin.failRuns.Store(1) },
			reason:   node.ReasonFailedCreateSandbox,
			wantRuns: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			tt.inject(w)
			created := w.createPod(t, "pod", false)
			msg := w.waitEvent(t, created, tt.reason)
			if !strings.Contains(msg, "injected "+tt.name+" failure") {
				t.Errorf("event message %q lacks the injected error", msg)
			}
			pod := w.waitRunning(t, "pod")
			if got := w.journal.count("RunPodSandbox " + string(pod.UID)); got != tt.wantRuns {
				t.Errorf("RunPodSandbox called %d times, want %d: %q", got, tt.wantRuns, w.journal.all())
			}
			if got := w.journal.count("prepare "); got < 1 {
				t.Errorf("no prepare: %q", w.journal.all())
			}
			if tt.name == "prepare" && w.journal.count("prepare ") != 2 {
				t.Errorf("want prepare twice (failed, then retried): %q", w.journal.all())
			}
		})
	}
}

// TestRunPodSandboxFailsUntilDeleted: a pod whose sandbox always fails stays
// Pending and keeps being retried with no sandbox left between attempts;
// as with containerd, the plugins get no StopPodSandbox or RemovePodSandbox
// for a sandbox that failed. Deleting the pod unprepares its claim.
func TestRunPodSandboxFailsUntilDeleted(t *testing.T) {
	w := newWorld(t)
	w.plugin.failRuns.Store(-1)
	created := w.createPod(t, "pod", false)
	uid := string(created.UID)
	w.waitEvent(t, created, node.ReasonFailedCreateSandbox)
	poll(t, "RunPodSandbox retried", func() bool { return w.journal.count("RunPodSandbox "+uid) >= 2 })
	if pod, _ := w.getPod(t, "pod"); pod.Status.Phase != corev1.PodPending {
		t.Fatalf("pod phase %s, want Pending", pod.Status.Phase)
	}
	if _, ok := w.node.Sandbox(created.UID); ok {
		t.Error("node reports a sandbox for a pod whose sandbox failed")
	}
	pod, _ := w.getPod(t, "pod")
	claim := generatedClaim(t, pod)
	w.deleteAndWaitGone(t, "pod")
	if i := w.journal.index("StopPodSandbox " + uid); i >= 0 {
		t.Errorf("StopPodSandbox sent for a failed sandbox: %q", w.journal.all())
	}
	if i := w.journal.index("RemovePodSandbox " + uid); i >= 0 {
		t.Errorf("RemovePodSandbox sent for a failed sandbox: %q", w.journal.all())
	}
	if w.journal.index("unprepare "+w.ns+"/"+claim) < 0 {
		t.Errorf("claim not unprepared: %q", w.journal.all())
	}
	if netnsListed(t, "tw-"+uid) {
		t.Errorf("netns of the failed sandbox left behind")
	}
}

// TestPluginReregistration: a driver that restarts, recreating its
// registration socket, is registered again.
func TestPluginReregistration(t *testing.T) {
	cp := worldtest.ControlPlane(t)
	n := worldtest.Node(t, cp)
	j := &journal{}
	d := startDriver(t, cp.Client(), n, j)
	d.helper.Stop()
	poll(t, "driver deregistered", func() bool { _, ok := n.Plugin(d.name); return !ok })
	startDriver(t, cp.Client(), n, j)
	if _, ok := n.Plugin(d.name); !ok {
		t.Fatal("driver not registered again")
	}
}

// TestStopTearsDownSandboxes: Stop removes every network namespace the node
// made, with StopPodSandbox and RemovePodSandbox to the plugins.
func TestStopTearsDownSandboxes(t *testing.T) {
	w := newWorld(t)
	created := w.createPod(t, "pod", false)
	w.waitRunning(t, "pod")
	netns, _ := w.node.Sandbox(created.UID)
	if err := w.node.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if netnsListed(t, netns) {
		t.Errorf("netns %s left after Stop", netns)
	}
	uid := string(created.UID)
	if w.journal.index("StopPodSandbox "+uid) < 0 || w.journal.index("RemovePodSandbox "+uid) < 0 {
		t.Errorf("journal %q: want StopPodSandbox and RemovePodSandbox at Stop", w.journal.all())
	}
}
