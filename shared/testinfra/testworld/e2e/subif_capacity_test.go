package e2e

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// shareTemplate creates a ResourceClaimTemplate for a share of bandwidth
// of one device of class.
func shareTemplate(t *testing.T, c kubernetes.Interface, ns, class, bandwidth string) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"podIfName": "net1"})
	tmpl := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: "share"}, Spec: resourceapi.ResourceClaimTemplateSpec{
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: class,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					"bandwidth": resource.MustParse(bandwidth)}}}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"net"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: raw}}}}},
		}}}}
	if _, err := c.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return tmpl.Name
}

// TestE2E_SharedParentByBandwidth: a macvlan parent shared by bandwidth
// (100M) is one device in the node's ResourceSlice; two pods whose claims
// ask 40M each run, each with a macvlan of its own held to 40 Mbit/s (a tbf
// in its netns), their allocations two shares of the one device; a third
// pod asking 40M more is not scheduled (the scheduler refuses what exceeds
// the capacity). When the pods are gone, so are the allocations.
func TestE2E_SharedParentByBandwidth(t *testing.T) {
	nn := startNetdra(t, "mvs0")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-mvs0", "up")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "mvs0", "up")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"subif": map[string]any{"enabled": true, "parents": []any{
			map[string]any{"name": "mvs", "parentIfName": "mvs0", "kind": "macvlan", "capacity": map[string]any{"bandwidth": "100M"}}}}},
		"pools": []any{map[string]any{"name": "shared", "filter": map[string]any{"deviceManagers": []any{"subif"}, "parentIfNames": []any{"mvs0"}}}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := shareTemplate(t, c, ns, deviceClass(t, c, "shared"), "40M")
	pods := []*corev1.Pod{newPod(t, c, ns, "sha", nn.node.Name(), tmpl), newPod(t, c, ns, "shb", nn.node.Name(), tmpl)}
	for _, pod := range pods {
		waitFor(t, "pod "+pod.Name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
			p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		})
		requireLines(t, pod.Name+"'s container", containerView(t, nn.node, pod), ": net1: <up")
		sb, ok := nn.node.Sandbox(pod.UID)
		if !ok {
			t.Fatalf("no sandbox for %s", pod.Name)
		}
		out, err := exec.Command("tc", "-n", sb, "qdisc", "show", "dev", "net1").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "tbf") || !strings.Contains(string(out), "rate 40Mbit") {
			t.Errorf("net1 of %s: qdiscs %q (%v), want a tbf at 40Mbit", pod.Name, out, err)
		}
	}
	third := newPod(t, c, ns, "shc", nn.node.Name(), tmpl)
	waitFor(t, "the scheduler to refuse a third share", time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, third.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse {
				t.Logf("the third pod: %s: %s", cond.Reason, cond.Message)
				return true, nil
			}
		}
		return false, nil
	})
	resp, err := nn.stateClient.ListAllocations(context.Background(), &statev1.ListAllocationsRequest{DeviceName: "mvs"})
	if err != nil {
		t.Fatal(err)
	}
	if as := resp.GetAllocations(); len(as) != 2 || as[0].GetShareId() == "" || as[0].GetShareId() == as[1].GetShareId() {
		t.Errorf("allocations of mvs: %v, want two shares", as)
	}
	for _, pod := range append(pods, third) {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, pod := range append(pods, third) {
		waitFor(t, "pod "+pod.Name+" to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
			_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	}
	waitFor(t, "the allocations to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
}
