package e2e

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// multusDeviceIDs does for a pod what Multus's DRA integration
// (multus-cni pkg/draclient, the extended-resource path) does before it
// calls a NetworkAttachmentDefinition's CNI plugin: for each request
// mapping of pod.status.extendedResourceClaimStatus, the claim's allocated
// devices, looked up in the node's ResourceSlices of their driver (listed
// with the same field selectors), must carry k8s.cni.cncf.io/resourceName
// equal to the mapping's resource name; their k8s.cni.cncf.io/deviceID
// values, by resource name, are what Multus hands the plugins.
func multusDeviceIDs(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) (map[string][]string, error) {
	ext := pod.Status.ExtendedResourceClaimStatus
	if ext == nil {
		return nil, fmt.Errorf("pod %s has no extendedResourceClaimStatus", pod.Name)
	}
	claim, err := c.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, ext.ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if claim.Status.Allocation == nil {
		return nil, fmt.Errorf("claim %s is not allocated", claim.Name)
	}
	out := map[string][]string{}
	for _, m := range ext.RequestMappings {
		for _, r := range claim.Status.Allocation.Devices.Results {
			if r.Request != m.RequestName {
				continue
			}
			name, id, err := multusAttributes(ctx, c, pod.Spec.NodeName, r)
			if err != nil {
				return nil, err
			}
			if name != m.ResourceName {
				return nil, fmt.Errorf("device %s: k8s.cni.cncf.io/resourceName %q, the mapping of request %s says %q", r.Device, name, m.RequestName, m.ResourceName)
			}
			out[name] = append(out[name], id)
		}
	}
	return out, nil
}

// multusAttributes returns the Multus attributes of r's device as the
// node's slices of r's driver publish it.
func multusAttributes(ctx context.Context, c kubernetes.Interface, node string, r resourceapi.DeviceRequestAllocationResult) (string, string, error) {
	slices, err := c.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: fmt.Sprintf("%s=%s,%s=%s",
		resourceapi.ResourceSliceSelectorNodeName, node, resourceapi.ResourceSliceSelectorDriver, r.Driver)})
	if err != nil {
		return "", "", err
	}
	str := func(d resourceapi.Device, name resourceapi.QualifiedName) string {
		if a, ok := d.Attributes[name]; ok && a.StringValue != nil {
			return *a.StringValue
		}
		return ""
	}
	for _, s := range slices.Items {
		if s.Spec.Pool.Name != r.Pool {
			continue
		}
		for _, d := range s.Spec.Devices {
			if d.Name == r.Device {
				return str(d, "k8s.cni.cncf.io/resourceName"), str(d, "k8s.cni.cncf.io/deviceID"), nil
			}
		}
	}
	return "", "", fmt.Errorf("device %s/%s/%s is in no slice of node %s", r.Driver, r.Pool, r.Device, node)
}
