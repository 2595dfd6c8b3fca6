package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// podDeviceHealth returns what the pod's status says of its claim net's
// device (containerStatuses[app].allocatedResourcesStatus, name claim:net):
// "health message resourceID", or "" while the kubelet reports nothing.
func podDeviceHealth(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) (string, error) {
	p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != "app" {
			continue
		}
		for _, rs := range cs.AllocatedResourcesStatus {
			if rs.Name != "claim:net" {
				continue
			}
			if len(rs.Resources) != 1 {
				return "", fmt.Errorf("claim:net has %d resources, want 1: %+v", len(rs.Resources), rs.Resources)
			}
			r := rs.Resources[0]
			return fmt.Sprintf("%s %q %s", r.Health, ptr.Deref(r.Message, ""), r.ResourceID), nil
		}
	}
	return "", nil
}

// expectPodHealth waits until the pod's status gives its device the health
// and message wanted.
func expectPodHealth(t *testing.T, c kubernetes.Interface, pod *corev1.Pod, what string, health corev1.ResourceHealthStatus, msg string) {
	t.Helper()
	want := fmt.Sprintf("%s %q ", health, msg)
	var last string
	waitFor(t, what, 2*time.Minute, func(ctx context.Context) (bool, error) {
		var err error
		last, err = podDeviceHealth(ctx, c, pod)
		if err != nil {
			return false, err
		}
		return len(last) > len(want) && last[:len(want)] == want, nil
	})
	t.Logf("%s: pod %s: %s", what, pod.Name, last)
}

// TestE2E_HealthInPodStatus: dra's device health reaches the pod's status
// through the real kubelet (DRAResourceHealth v1 stream, ResourceHealthStatus
// and ResourceHealthStatusMessage, beta and on by default in v1.37):
// containerStatuses[].allocatedResourcesStatus of the container that uses
// the claim. A pod's macvlan sub-interface, which the host keeps seeing
// through its parent, turns Unhealthy when the parent loses its carrier
// (its veth peer down) and Healthy again when the peer is up. A host
// device handed whole to a pod is out of the host's sight: its health
// there is Unknown, with the reason in the message.
func TestE2E_HealthInPodStatus(t *testing.T) {
	nn := startNetdra(t, "data0", "hsp0")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-hsp0", "up")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "hsp0", "up")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{
			"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}},
			"subif": map[string]any{"enabled": true, "parents": []any{
				map[string]any{"name": "hs", "parentIfName": "hsp0", "kind": "macvlan", "mode": "bridge", "count": 1}}}},
		"pools": []any{
			map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}},
			map[string]any{"name": "sub", "filter": map[string]any{"deviceManagers": []any{"subif"}}}},
	})
	ns := worldtest.Namespace(t, c)
	subTmpl := claimTemplate(t, c, ns, deviceClass(t, c, "sub"), map[string]any{"podIfName": "net1"})
	sub := newPod(t, c, ns, "hsub", nn.node.Name(), subTmpl)
	expectPodHealth(t, c, sub, "the sub-interface healthy in the pod's status", corev1.ResourceHealthStatusHealthy, "link up")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-hsp0", "down")
	expectPodHealth(t, c, sub, "the sub-interface unhealthy once its parent has no carrier", corev1.ResourceHealthStatusUnhealthy, "link down: no carrier")
	nodetest.IP(t, "-n", nn.hostNS, "link", "set", "p-hsp0", "up")
	expectPodHealth(t, c, sub, "the sub-interface healthy again", corev1.ResourceHealthStatusHealthy, "link up")

	ns2 := worldtest.Namespace(t, c) // claimTemplate names its template net
	hostTmpl := claimTemplate(t, c, ns2, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1"})
	hd := newPod(t, c, ns2, "hhost", nn.node.Name(), hostTmpl)
	expectPodHealth(t, c, hd, "the host device's health in the pod's status", corev1.ResourceHealthStatusUnknown,
		"in a pod's network namespace: its link is not visible from the host")
}
