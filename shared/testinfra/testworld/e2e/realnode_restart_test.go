package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// restartWorld is a real node with netdra, two host devices in one pool
// and a pod holding one of them.
type restartWorld struct {
	nn   *netdraNode
	c    kubernetes.Interface
	ns   string
	tmpl string
	pod  *corev1.Pod
}

func startRestartWorld(t *testing.T) *restartWorld {
	nn := startNetdra(t, "data0", "data1")
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0", "data1"}}},
		"pools":                []any{map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}}},
	})
	w := &restartWorld{nn: nn, c: nn.cp.Client()}
	w.ns = worldtest.Namespace(t, w.c)
	w.tmpl = claimTemplate(t, w.c, w.ns, deviceClass(t, w.c, "net"), map[string]any{"podIfName": "net1", "mtu": 1400})
	w.pod = w.runningPod(t, "before")
	return w
}

// runningPod creates a pod with a claim and waits until its container saw
// net1 from its first moment.
func (w *restartWorld) runningPod(t *testing.T, name string) *corev1.Pod {
	t.Helper()
	pod := newPod(t, w.c, w.ns, name, w.nn.node.Name(), w.tmpl)
	waitFor(t, "pod "+name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := w.c.CoreV1().Pods(w.ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	requireLines(t, "the container of "+name, containerView(t, w.nn.node, pod), ": net1: <up", "mtu 1400")
	return pod
}

// stillHasNet1 fails unless the pod's sandbox still holds net1.
func (w *restartWorld) stillHasNet1(t *testing.T) {
	t.Helper()
	netns, ok := w.nn.node.Sandbox(w.pod.UID)
	if !ok {
		t.Fatalf("pod %s lost its sandbox", w.pod.Name)
	}
	if _, ok := link(t, netns, "net1"); !ok {
		t.Errorf("pod %s lost net1", w.pod.Name)
	}
}

// TestE2E_KubeletRestart: the kubelet restarts while a pod holds a device.
// At start the kubelet deletes every ResourceSlice of its node; dra puts
// them back within its short sync delay (the resourceslice controller's
// default of 30 s left new pods unschedulable that long). The pod keeps its
// device and a new pod with a claim starts.
func TestE2E_KubeletRestart(t *testing.T) {
	w := startRestartWorld(t)
	ctx := context.Background()
	if err := w.nn.node.RestartKubelet(ctx); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	// Not a timed assertion of speed: 20 s is well under the 30 s the
	// default sync delay takes, and far over what dra needs.
	waitFor(t, "the node's slices back", 20*time.Second, func(ctx context.Context) (bool, error) {
		n, err := driverSlices(ctx, w.c, w.nn.node.Name(), driver)
		return err == nil && n == 1, nil
	})
	t.Logf("slices back %s after the restarted kubelet was Ready", time.Since(restarted).Round(time.Millisecond))
	w.stillHasNet1(t)
	w.runningPod(t, "after")
}

// TestE2E_ContainerdRestart: containerd restarts while a pod holds a
// device. The containers keep running in their shims, nri reconnects to
// the new NRI socket, the pod keeps its device and a new pod gets one.
func TestE2E_ContainerdRestart(t *testing.T) {
	w := startRestartWorld(t)
	if err := w.nn.node.RestartContainerd(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.stillHasNet1(t)
	w.runningPod(t, "after")
}
