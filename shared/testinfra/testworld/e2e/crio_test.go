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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_CRIO is netdra on a real node whose runtime is CRI-O v1.34.0
// (NRI on, runc, conmon), what the other end-to-end tests check on
// containerd, one node for the three parts so that CI pays CRI-O's node
// start once:
//
//   - a pod gets its device: net1 with the claim's MTU and address from
//     the container's first moment, through CRI-O's NRI RunPodSandbox
//     hook and the CDI spec dra wrote (CRI-O runs its createRuntime hook,
//     netdra's netns check, as containerd does);
//   - fail-closed with nri killed: CRI-O 1.34 has no NRI validator (its
//     NRI is v0.9; the default validator came with NRI v0.10), so the
//     pod's required-plugins annotation holds nothing back, unlike on
//     containerd; the container is refused by netdra's CDI hook, whose
//     error names net1, and none of it runs until nri is back, when the
//     kubelet's next try starts it with net1;
//   - CRI-O restarted while pods hold devices: they keep them (the
//     containers keep running under their conmon), nri reconnects to the
//     new NRI socket and a new pod gets a device;
//   - restart recovery, what the restart tests check on containerd: each
//     of state, the provisioner, dra and nri killed (-9) while two pods
//     hold devices, a pod created while it is away and the process started
//     again a second later, as its container's restart would: the pod
//     runs with net1 and the two keep theirs (a pod that meets a killed
//     nri is refused by the CDI hook, not by a validator, and started by
//     the kubelet's next try); then the provisioner killed and a pod
//     deleted while it is down (TestE2E_ProvisionerKilledThenPodTornDown):
//     CRI-O tears the pod's netns down, the restarted provisioner takes
//     the veth back, dra's retried Free frees the claim, no device lost.
//
// CRI-O's NRI is on through the drop-in docs/install.md gives, written
// from the guide's text (the node's crio.conf turns NRI off), and dra's
// kubelet sockets are held by `dra sockets`, as the DaemonSet runs it.
func TestE2E_CRIO(t *testing.T) {
	nn := startNetdraOpts(t, true, nil, []worldtest.NodeOption{worldtest.WithRuntime(realnode.CRIO)}, "data0", "data1", "data2")
	if log, err := os.ReadFile(nn.node.LogPath("crio")); err != nil || !strings.Contains(string(log), "crio.conf.d/10-nri.conf") {
		t.Errorf("CRI-O did not log reading the install guide's NRI drop-in (crio.conf.d/10-nri.conf) (%v)", err)
	}
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0", "data1", "data2"}}},
		"pools":                []any{map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}}},
	})
	w := &restartWorld{nn: nn, c: nn.cp.Client()}
	w.ns = worldtest.Namespace(t, w.c)
	w.tmpl = claimTemplate(t, w.c, w.ns, deviceClass(t, w.c, "net"), map[string]any{"podIfName": "net1", "mtu": 1400})

	t0 := time.Now()
	w.pod = w.runningPod(t, "first")
	t.Logf("a pod with its device ran %s after its creation", time.Since(t0).Round(100*time.Millisecond))
	w.stillHasNet1(t)

	// Fail-closed: nri killed, a pod that requires it is created.
	nn.nriP.Kill()
	pod, err := w.c.CoreV1().Pods(w.ns).Create(context.Background(), podWithClaim("nri-down", nn.node.Name(), w.tmpl), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var refused string
	waitFor(t, "the container's creation refused by the netns hook", 2*time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := w.c.CoreV1().Events(w.ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "net1 not in the network namespace") {
				refused = e.Message
				return true, nil
			}
			if strings.Contains(e.Message, "required plugin") {
				t.Errorf("CRI-O 1.34 refused for the required-plugins annotation, which this test says it does not read: %s", e.Message)
			}
		}
		return false, nil
	})
	t.Logf("refused on CRI-O: %s", refused)
	if p, err := w.c.CoreV1().Pods(w.ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); err == nil && containerRuns(p) {
		t.Fatal("the pod's container runs while nri is down")
	}
	nn.nriP.Restart()
	var running *corev1.Pod
	waitFor(t, "the pod to run once nri is back", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := w.c.CoreV1().Pods(w.ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || !containerRuns(p) || len(p.Status.ContainerStatuses) != 1 {
			return false, nil
		}
		running = p
		return true, nil
	})
	requireLines(t, "the container started once nri was back", ranView(t, nn.node, running), ": net1: <up", "mtu 1400")

	// CRI-O restarted under two pods holding devices.
	if err := nn.node.RestartRuntime(context.Background()); err != nil {
		t.Fatal(err)
	}
	w.stillHasNet1(t)
	if netns, ok := nn.node.Sandbox(running.UID); !ok {
		t.Errorf("pod %s has no sandbox after CRI-O's restart", running.Name)
	} else if _, ok := link(t, netns, "net1"); !ok {
		t.Errorf("pod %s lost net1 in CRI-O's restart", running.Name)
	}
	after := w.runningPod(t, "after-restart")
	w.deleteHolding(t, after, 2)

	// netdra's processes killed one by one while pods start.
	recovery := time.Now()
	held := []*corev1.Pod{w.pod, running}
	for _, p := range []*nodetest.Proc{nn.state, nn.prov, nn.dra, nn.nriP} {
		p.Kill()
		pod := newPod(t, w.c, w.ns, "killed-"+p.Name, nn.node.Name(), w.tmpl)
		t0 := time.Now()
		time.Sleep(time.Second)
		p.Restart()
		waitFor(t, "pod "+pod.Name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
			cur, err := w.c.CoreV1().Pods(w.ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && containerRuns(cur), nil
		})
		t.Logf("%s killed: a pod created then ran %s after its creation", p.Name, time.Since(t0).Round(100*time.Millisecond))
		requireLines(t, "the container of "+pod.Name, ranView(t, nn.node, pod), ": net1: <up", "mtu 1400")
		for _, h := range held {
			if netns, ok := nn.node.Sandbox(h.UID); !ok {
				t.Errorf("pod %s has no sandbox after %s's kill", h.Name, p.Name)
			} else if _, ok := link(t, netns, "net1"); !ok {
				t.Errorf("pod %s lost net1 in %s's kill", h.Name, p.Name)
			}
		}
		w.deleteHolding(t, pod, len(held))
	}

	// The provisioner killed, a pod torn down while it is away.
	netns := w.netns(t)
	nn.prov.Kill()
	zero := int64(0)
	if err := w.c.CoreV1().Pods(w.ns).Delete(context.Background(), w.pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "CRI-O to tear the pod's netns down", 2*time.Minute, func(context.Context) (bool, error) {
		_, err := os.Stat(filepath.Join("/var/run/netns", netns))
		return errors.Is(err, fs.ErrNotExist), nil
	})
	nn.prov.Restart()
	waitFor(t, "two veths back in the host netns, one allocation left", 2*time.Minute, func(ctx context.Context) (bool, error) {
		back := 0
		for _, d := range []string{"data0", "data1", "data2"} {
			if _, ok := link(t, nn.hostNS, d); ok {
				back++
			}
		}
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return back == 2 && err == nil && len(resp.GetAllocations()) == 1, nil
	})
	if strings.Contains(nn.dra.Log(), "Device lost") || strings.Contains(nn.prov.Log(), "Device lost") {
		t.Error("a device was reported lost")
	}
	w.pod = running
	w.stillHasNet1(t)
	w.runningPod(t, "after-kills")
	t.Logf("restart recovery took %s", time.Since(recovery).Round(100*time.Millisecond))
}

// deleteHolding deletes pod and waits until it is gone and left
// allocations remain, those of the pods that still hold devices.
func (w *restartWorld) deleteHolding(t *testing.T, pod *corev1.Pod, left int) {
	t.Helper()
	if err := w.c.CoreV1().Pods(w.ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "pod "+pod.Name+" gone and its allocation freed", 2*time.Minute, func(ctx context.Context) (bool, error) {
		if _, err := w.c.CoreV1().Pods(w.ns).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, nil
		}
		resp, err := w.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == left, nil
	})
}
