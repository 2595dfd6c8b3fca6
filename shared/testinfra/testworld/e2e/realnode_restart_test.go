package e2e

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
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

// netns is the name of the pod's sandbox netns (under /var/run/netns).
func (w *restartWorld) netns(t *testing.T) string {
	t.Helper()
	netns, ok := w.nn.node.Sandbox(w.pod.UID)
	if !ok {
		t.Fatalf("pod %s has no sandbox", w.pod.Name)
	}
	return netns
}

// stillHasNet1 fails unless the pod's sandbox still holds net1.
func (w *restartWorld) stillHasNet1(t *testing.T) {
	t.Helper()
	if _, ok := link(t, w.netns(t), "net1"); !ok {
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

// TestE2E_ProvisionerKilledThenPodTornDown is the long chaos run's loss: the
// provisioner is killed (kill -9) while a pod holds a host veth, and the
// pod is deleted while it is down: nri's Detach fails, containerd tears
// the pod's netns down anyway, and the veth would die with it. The
// restarted provisioner reopens its pin of that netns and takes the veth
// back; dra's retried Free then frees the claim.
func TestE2E_ProvisionerKilledThenPodTornDown(t *testing.T) {
	w := startRestartWorld(t)
	ctx := context.Background()
	netns := w.netns(t)
	w.nn.prov.Kill()
	zero := int64(0)
	if err := w.c.CoreV1().Pods(w.ns).Delete(ctx, w.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "containerd to tear the pod's netns down", 2*time.Minute, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join("/var/run/netns", netns))
		return errors.Is(err, fs.ErrNotExist), nil
	})
	w.nn.prov.Restart()
	waitFor(t, "both veths back in the host netns", time.Minute, func(context.Context) (bool, error) {
		_, ok0 := link(t, w.nn.hostNS, "data0")
		_, ok1 := link(t, w.nn.hostNS, "data1")
		return ok0 && ok1, nil
	})
	waitFor(t, "no allocation left", 2*time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := w.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
	if strings.Contains(w.nn.dra.Log(), "Device lost") || strings.Contains(w.nn.prov.Log(), "Device lost") {
		t.Error("a device was reported lost")
	}
	w.runningPod(t, "after")
}
