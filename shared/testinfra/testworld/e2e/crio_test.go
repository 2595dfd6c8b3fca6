package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
//     new NRI socket and a new pod gets a device.
func TestE2E_CRIO(t *testing.T) {
	nn := startNetdraOpts(t, false, nil, []worldtest.NodeOption{worldtest.WithRuntime(realnode.CRIO)}, "data0", "data1", "data2")
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
	w.runningPod(t, "after-restart")
}
