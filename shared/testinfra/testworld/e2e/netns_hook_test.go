package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_NetnsHookWithoutNri: with nri down and no required-plugins
// annotation on the pod (so containerd's default validator does not stop
// it), the sandbox starts without net1, and the CDI createRuntime hook dra
// put on the claim's device refuses the container: the runtime's error
// names net1. Once nri is back (it attaches the running sandbox's devices
// when it reconnects), the kubelet's next try creates the container, which
// sees net1 from its first moment.
func TestE2E_NetnsHookWithoutNri(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1", "addresses": []string{"10.42.0.2/24"}})
	nn.nriP.Kill()

	spec := podWithClaim("app", nn.node.Name(), tmpl)
	delete(spec.Annotations, realnode.RequiredPluginsAnnotation)
	pod, err := c.CoreV1().Pods(ns).Create(context.Background(), spec, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var refused string
	waitFor(t, "the container's creation refused by the netns hook", 2*time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod.Name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Type == corev1.EventTypeWarning && strings.Contains(e.Message, "net1 not in the network namespace") {
				refused = e.Message
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("refused: %s", refused)
	// Its phase may say Running (restartPolicy Always, a container was
	// created): no container of it may run.
	if p, err := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{}); err == nil && containerRuns(p) {
		t.Fatal("the pod's container runs while nri is down")
	}

	nn.nriP.Restart()
	var running *corev1.Pod
	waitFor(t, "the pod to run once nri is back", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil || !containerRuns(p) || len(p.Status.ContainerStatuses) != 1 {
			return false, nil
		}
		running = p
		return true, nil
	})
	// The refused starts may count as attempts: the one that ran wrote
	// the dump.
	requireLines(t, "the container", ranView(t, nn.node, running), ": net1: <up", "inet 10.42.0.2/24")
}

// ranView is the dump of whichever attempt of the pod's app container got
// to run.
func ranView(t *testing.T, n *realnode.Node, pod *corev1.Pod) string {
	t.Helper()
	dir := filepath.Dir(realnode.ContainerLogPath(n.Dir(), pod.Namespace, pod.Name, pod.UID, "app", 0))
	var view string
	waitFor(t, "a dump of the container's network in "+dir, time.Minute, func(context.Context) (bool, error) {
		logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
		for _, l := range logs {
			if log, err := realnode.ReadContainerLog(l); err == nil && strings.Contains(log, "testapp end 1\n") {
				view = log[:strings.Index(log, "testapp end 1\n")]
				return true, nil
			}
		}
		return false, nil
	})
	return view
}
