package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/services/dra/publish"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_IPPoolExhaustedBeforeScheduling: a pool of two devices whose
// claims take addresses from an address pool of one address. The first
// pod takes the address; from then on both devices carry the
// netdra.io/ip-pool-exhausted NoSchedule taint in their ResourceSlice, so
// the scheduler leaves the second pod Pending (Unschedulable) instead of
// sending it to a node whose prepare would fail for want of an address.
// Once the first pod is gone, the taint goes and the second pod runs with
// the address.
func TestE2E_IPPoolExhaustedBeforeScheduling(t *testing.T) {
	nn := startNetdra(t, "ipx0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"ipx0", "p-ipx0"}}},
		"pools":                []any{map[string]any{"name": "wire", "ipPools": []any{"one"}}},
		"ipPools": []any{
			map[string]any{"name": "one", "subnet": "10.61.0.0/24", "rangeStart": "10.61.0.10", "rangeEnd": "10.61.0.10"},
		},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "wire"), map[string]any{"podIfName": "net1", "ipPools": []string{"one"}})
	node := nn.node.Name()
	first := newPod(t, c, ns, "first", node, tmpl)
	waitFor(t, "the first pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	exhausted := func(ctx context.Context, device string) (bool, error) {
		taints, ok, err := deviceTaints(ctx, c, node, device)
		if err != nil || !ok {
			return false, err
		}
		for _, taint := range taints {
			if taint.Key == publish.TaintIPPoolExhausted && taint.Value == "one" && taint.Effect == "NoSchedule" {
				return true, nil
			}
		}
		return false, nil
	}
	waitFor(t, "both devices tainted for the exhausted pool", time.Minute, func(ctx context.Context) (bool, error) {
		a, err := exhausted(ctx, "ipx0")
		if err != nil || !a {
			return false, err
		}
		return exhausted(ctx, "p-ipx0")
	})

	second := newPod(t, c, ns, "second", node, tmpl)
	waitFor(t, "the scheduler to leave the second pod unschedulable", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
				t.Logf("the second pod is unschedulable: %s", cond.Message)
				return true, nil
			}
		}
		if p.Spec.NodeName != "" {
			t.Fatalf("the second pod was scheduled to %s with its address pool exhausted", p.Spec.NodeName)
		}
		return false, nil
	})

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the second pod to run once the address is free", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, second.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	requireLines(t, "the second pod's container", containerView(t, nn.node, second), "inet 10.61.0.10/24")
}
