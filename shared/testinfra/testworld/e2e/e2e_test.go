package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

var nodeConfigs = schema.GroupVersionResource{Group: "netdra.io", Version: "v1alpha1", Resource: "nodeconfigs"}

const driver = "netdra.io"

// deviceClass creates a DeviceClass selecting the pool, named after the
// test, removed at the end.
func deviceClass(t *testing.T, c kubernetes.Interface, pool string) string {
	t.Helper()
	name := pool + "-" + strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))
	if len(name) > 60 {
		name = name[:60]
	}
	return worldtest.DeviceClass(t, c, name, pool)
}

// claimTemplate creates a ResourceClaimTemplate for one device of class
// with the given opaque parameters.
func claimTemplate(t *testing.T, c kubernetes.Interface, ns, class string, params map[string]any) string {
	t.Helper()
	return worldtest.ClaimTemplate(t, c, ns, class, params)
}

func newPod(t *testing.T, c kubernetes.Interface, ns, name, node, template string) *corev1.Pod {
	t.Helper()
	pod, err := c.CoreV1().Pods(ns).Create(context.Background(), podWithClaim(name, node, template), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// podWithClaim is a pod on node whose test-app container uses a claim
// from template. It requires netdra's NRI plugin (NRI's default validator
// refuses its containers while netdra's nri is not connected), as a user
// of netdra's fail-closed would write it.
func podWithClaim(name, node, template string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name,
		Annotations: map[string]string{realnode.RequiredPluginsAnnotation: `["netdra"]`}}, Spec: corev1.PodSpec{
		NodeSelector:                  map[string]string{corev1.LabelHostname: node},
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &template}},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Containers: []corev1.Container{{Name: "app", Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "net"}}}}},
	}}
}

// containerView returns the first complete dump of the pod's test-app
// container: what the container itself saw of its network when it started
// (its interfaces, addresses and routes, and the pings it was asked for).
func containerView(t *testing.T, n *realnode.Node, pod *corev1.Pod) string {
	t.Helper()
	var log string
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		var err error
		log, err = n.ContainerLog(pod.Namespace, pod.Name, pod.UID, "app", 0)
		return err == nil && strings.Contains(log, "testapp end 1\n"), err
	})
	if err != nil {
		dir := filepath.Dir(realnode.ContainerLogPath(n.Dir(), pod.Namespace, pod.Name, pod.UID, "app", 0))
		files, _ := filepath.Glob(filepath.Join(filepath.Dir(dir), "*", "*"))
		t.Fatalf("waiting for the first dump of the network of %s/%s (uid %s): %v; its log folder holds %q; "+
			"attempt 0's log so far:\n%s", pod.Namespace, pod.Name, pod.UID, err, files, log)
	}
	return log[:strings.Index(log, "testapp end 1\n")]
}

// requireLines fails the test unless view has every line (substrings).
func requireLines(t *testing.T, what, view string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(view, l) {
			t.Errorf("%s has no %q; it saw:\n%s", what, l, view)
		}
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, cond); err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}

type ipLink struct {
	Address   string `json:"address"`
	MTU       int    `json:"mtu"`
	AddrInfos []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

func link(t *testing.T, ns, name string) (ipLink, bool) {
	out, err := exec.Command("ip", "-n", ns, "-j", "addr", "show", "dev", name).Output()
	if err != nil {
		return ipLink{}, false
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		t.Fatalf("ip -j addr: %v %s", err, out)
	}
	return links[0], true
}

func (l ipLink) has(cidr string) bool {
	for _, a := range l.AddrInfos {
		if fmt.Sprintf("%s/%d", a.Local, a.PrefixLen) == cidr {
			return true
		}
	}
	return false
}

// TestE2E_PodGetsItsDevice is netdra's main job: a pod claiming a network
// device through a ResourceClaimTemplate gets it in its network namespace
// with the claim's name, MAC, MTU, addresses and route; when the pod is
// deleted, the device is back in the host as it was and its allocation is
// gone.
func TestE2E_PodGetsItsDevice(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net", "filter": map[string]any{"deviceManagers": []any{"host"}}}},
	})
	ns := worldtest.Namespace(t, c)
	class := deviceClass(t, c, "net")
	tmpl := claimTemplate(t, c, ns, class, map[string]any{
		"podIfName": "net1", "mac": "02:00:00:00:ee:01", "mtu": 1400,
		"addresses": []string{"10.40.0.2/24", "fd00:40::2/64"},
		"routes":    []map[string]string{{"destination": "10.41.0.0/16", "gateway": "10.40.0.1"}},
	})
	before, ok := link(t, nn.hostNS, "data0")
	if !ok {
		t.Fatal("data0 missing in the host netns")
	}

	pod := newPod(t, c, ns, "app", nn.node.Name(), tmpl)
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	// The container's own view, from its first moment.
	requireLines(t, "the container", containerView(t, nn.node, pod),
		": net1: <up", "mtu 1400 hw 02:00:00:00:ee:01", "inet 10.40.0.2/24", "inet fd00:40::2/64",
		"route 10.41.0.0/16 via 10.40.0.1 dev net1")
	netns, ok := nn.node.Sandbox(pod.UID)
	if !ok {
		t.Fatal("the node has no sandbox for the pod")
	}
	in, ok := link(t, netns, "net1")
	if !ok {
		t.Fatalf("net1 is not in the pod netns %s", netns)
	}
	if in.Address != "02:00:00:00:ee:01" || in.MTU != 1400 || !in.has("10.40.0.2/24") || !in.has("fd00:40::2/64") {
		t.Errorf("net1 in the pod: %+v", in)
	}
	if out, _ := exec.Command("ip", "-n", netns, "route", "show", "10.41.0.0/16").Output(); !strings.Contains(string(out), "via 10.40.0.1") {
		t.Errorf("route in the pod: %q", out)
	}
	// The claim's status carries the prepared device and its network data.
	p, _ := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	claimName := *p.Status.ResourceClaimStatuses[0].ResourceClaimName
	claim, err := c.ResourceV1().ResourceClaims(ns).Get(context.Background(), claimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(claim.Status.Devices) != 1 || claim.Status.Devices[0].Data == nil || claim.Status.Devices[0].NetworkData == nil ||
		claim.Status.Devices[0].NetworkData.InterfaceName != "net1" {
		t.Errorf("claim status devices: %+v", claim.Status.Devices)
	}

	if err := c.CoreV1().Pods(ns).Delete(context.Background(), pod.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the pod to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	waitFor(t, "the allocation to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		resp, err := nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{DeviceName: "data0"})
		return err == nil && len(resp.GetAllocations()) == 0, nil
	})
	after, ok := link(t, nn.hostNS, "data0")
	if !ok {
		t.Fatal("data0 is not back in the host netns")
	}
	if after.Address != before.Address || after.MTU != before.MTU {
		t.Errorf("data0 back as %s/%d, want %s/%d", after.Address, after.MTU, before.Address, before.MTU)
	}
}

// TestE2E_BadClaimConfig: an invalid parameter keeps the pod from starting,
// an event on the claim names the field, and the node is untouched.
func TestE2E_BadClaimConfig(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1", "vlan": 5000})
	pod := newPod(t, c, ns, "app", nn.node.Name(), tmpl)
	waitFor(t, "an event naming the bad field", 2*time.Minute, func(ctx context.Context) (bool, error) {
		evs, err := c.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "ResourceClaim" && strings.Contains(e.Message, "vlan") {
				return true, nil
			}
		}
		return false, nil
	})
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil || p.Status.Phase == corev1.PodRunning {
		t.Errorf("the pod runs with a bad config: %v %v", p.Status.Phase, err)
	}
	if _, ok := link(t, nn.hostNS, "data0"); !ok {
		t.Error("data0 left the host netns")
	}
	resp, err := nn.stateClient.ListAllocations(context.Background(), &statev1.ListAllocationsRequest{})
	if err != nil || len(resp.GetAllocations()) != 0 {
		t.Errorf("allocations after a refused prepare: %v %v", resp.GetAllocations(), err)
	}
}

// slicePools returns the pools this node's ResourceSlices publish, by
// netdra's pool name, with the number of devices in each. A slice pool is
// named <node>/<pool>; one that is not is returned under its whole name
// with a "not-node-prefixed:" mark, so that no assertion on a pool name
// holds for it.
func slicePools(ctx context.Context, c kubernetes.Interface, node string) (map[string]int, error) {
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, s := range slices.Items {
		if s.Spec.Driver == driver && s.Spec.NodeName != nil && *s.Spec.NodeName == node {
			name, ok := strings.CutPrefix(s.Spec.Pool.Name, node+"/")
			if !ok {
				name = "not-node-prefixed:" + s.Spec.Pool.Name
			}
			out[name] += len(s.Spec.Devices)
		}
	}
	return out, nil
}

// TestE2E_NodeConfigChangeRepublishes: renaming a pool and adding a device
// to it is applied without a restart: the slices follow.
func TestE2E_NodeConfigChangeRepublishes(t *testing.T) {
	nn := startNetdra(t, "data0", "data1")
	c := nn.cp.Client()
	host := func(names ...any) map[string]any {
		return map[string]any{"host": map[string]any{"enabled": true, "ifNames": names}}
	}
	nn.applyNodeConfig(t, map[string]any{"deviceManagerConfigs": host("data0"), "pools": []any{map[string]any{"name": "red"}}})
	waitFor(t, "pool red with data0", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && p["red"] == 1 && len(p) == 1, nil
	})
	nn.applyNodeConfig(t, map[string]any{"deviceManagerConfigs": host("data0", "data1"), "pools": []any{map[string]any{"name": "blue"}}})
	var last map[string]int
	waitFor(t, "pool blue with both devices, and red gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		last = p
		return err == nil && p["blue"] == 2 && len(p) == 1, nil
	})
	t.Logf("published: %v", last)
	if !strings.Contains(nn.dra.Log(), "NodeConfig applied") {
		t.Error("dra did not log the new NodeConfig as applied")
	}
}

// TestE2E_DraRestart: dra is killed (-9) while a pod holds its device and
// started again; it recovers its state, and deleting the pod still returns
// the device and removes the allocation: nothing leaked.
func TestE2E_DraRestart(t *testing.T) {
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net"}},
	})
	ns := worldtest.Namespace(t, c)
	tmpl := claimTemplate(t, c, ns, deviceClass(t, c, "net"), map[string]any{"podIfName": "net1"})
	pod := newPod(t, c, ns, "app", nn.node.Name(), tmpl)
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	nn.dra.Restart()
	nn.deletePods(t, c, ns, []*corev1.Pod{pod})
	if _, ok := link(t, nn.hostNS, "data0"); !ok {
		t.Error("data0 is not back in the host netns")
	}
}
