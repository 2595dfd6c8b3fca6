package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_ExtendedResource: the migration path from the SR-IOV device
// plugin (DRAExtendedResource). A DeviceClass names an extended resource
// and carries the device configuration; a pod that only asks
// resources.limits for that resource, as device plugin users write it, is
// given a claim by the scheduler, and its container sees the netdra device
// configured by the class. The pool names the resource as Multus's DRA
// integration reads it (multusResourceName): Multus's lookup of the pod's
// devices finds data0 under the resource name of its
// NetworkAttachmentDefinitions, the extended resource's.
func TestE2E_ExtendedResource(t *testing.T) {
	const resName = "example.com/sriov-net"
	nn := startNetdra(t, "data0")
	c := nn.cp.Client()
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"data0"}}},
		"pools":                []any{map[string]any{"name": "net", "multusResourceName": resName}},
	})
	raw, _ := json.Marshal(map[string]any{"podIfName": "net1", "addresses": []string{"10.42.0.2/24"}})
	dc := &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "extended-net"}, Spec: resourceapi.DeviceClassSpec{
		ExtendedResourceName: ptr.To(resName),
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].pool == "net"`, driver, driver)}}},
		Config: []resourceapi.DeviceClassConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
			Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driver, Parameters: runtime.RawExtension{Raw: raw}}}}},
	}}
	if _, err := c.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.ResourceV1().DeviceClasses().Delete(context.Background(), dc.Name, metav1.DeleteOptions{})
	})
	waitFor(t, "pool net with data0", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := slicePools(ctx, c, nn.node.Name())
		return err == nil && p["net"] == 1, nil
	})

	ns := worldtest.Namespace(t, c)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app",
		Annotations: map[string]string{realnode.RequiredPluginsAnnotation: `["netdra"]`}}, Spec: corev1.PodSpec{
		NodeSelector:                  map[string]string{corev1.LabelHostname: nn.node.Name()},
		TerminationGracePeriodSeconds: ptr.To[int64](5),
		Containers: []corev1.Container{{Name: "app", Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{resName: resource.MustParse("1")}}}},
	}}
	pod, err := c.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		got, err = c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	})
	if got.Status.ExtendedResourceClaimStatus == nil || got.Status.ExtendedResourceClaimStatus.ResourceClaimName == "" {
		t.Errorf("pod status has no extended resource claim: %+v", got.Status.ExtendedResourceClaimStatus)
	} else {
		t.Logf("extended resource claim: %+v", *got.Status.ExtendedResourceClaimStatus)
	}
	requireLines(t, "the container", containerView(t, nn.node, pod), ": net1: <up", "inet 10.42.0.2/24")
	ids, err := multusDeviceIDs(context.Background(), c, got)
	if err != nil {
		t.Fatalf("Multus's lookup of the pod's devices: %v", err)
	}
	if want := map[string][]string{resName: {"data0"}}; fmt.Sprint(ids) != fmt.Sprint(want) {
		t.Errorf("Multus's device IDs: %v, want %v (the pool's multusResourceName, the device's host interface name)", ids, want)
	}
}
