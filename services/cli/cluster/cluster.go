// Package cluster is what kubectl netdra reads from the apiserver: the
// netdra pod of a node and its containers, NodeConfigs, the driver's
// ResourceSlices, claims, DeviceClasses, pods and their Warning events; and
// a node's processes, through `kubectl exec` of their inspect subcommand
// in the node pod's containers (Exec). It only reads, and execs nothing
// but inspect.
package cluster

import (
	"context"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netdra/netdra/services/cli/report"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// NodePodLabel selects the node DaemonSet's pods (the chart's and
// pods/base's label).
const NodePodLabel = "app.kubernetes.io/name=netdra-node"

// Client reads the cluster.
type Client struct {
	Config  *rest.Config
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// New makes a Client for cfg.
func New(cfg *rest.Config) (*Client, error) {
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Config: cfg, Kube: kc, Dynamic: dc}, nil
}

var nodeConfigs = v1alpha1.GroupVersion.WithResource("nodeconfigs")

// NodeConfig returns the node's NodeConfig; nil, nil when it has none.
func (c *Client) NodeConfig(ctx context.Context, node string) (*v1alpha1.NodeConfig, error) {
	u, err := c.Dynamic.Resource(nodeConfigs).Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		if isNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("NodeConfig %s: %w", node, err)
	}
	var nc v1alpha1.NodeConfig
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &nc); err != nil {
		return nil, fmt.Errorf("NodeConfig %s: %w", node, err)
	}
	return &nc, nil
}

// NodeConfigs lists every NodeConfig.
func (c *Client) NodeConfigs(ctx context.Context) ([]v1alpha1.NodeConfig, error) {
	l, err := c.Dynamic.Resource(nodeConfigs).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing NodeConfigs: %w", err)
	}
	out := make([]v1alpha1.NodeConfig, len(l.Items))
	for i := range l.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(l.Items[i].Object, &out[i]); err != nil {
			return nil, fmt.Errorf("NodeConfig %s: %w", l.Items[i].GetName(), err)
		}
	}
	return out, nil
}

// Drivers are the driver names NodeConfigs name (the default one when
// none does).
func Drivers(ncs []v1alpha1.NodeConfig) map[string]bool {
	out := map[string]bool{v1alpha1.DefaultDriverName: true}
	for _, nc := range ncs {
		for _, d := range []string{nc.Spec.DriverName, nc.Status.DriverName} {
			if d != "" {
				out[d] = true
			}
		}
	}
	return out
}

// NodePod returns the netdra node pod on node in namespace ns.
func (c *Client) NodePod(ctx context.Context, ns, node string) (*corev1.Pod, error) {
	l, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: NodePodLabel,
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", node).String()})
	if err != nil {
		return nil, fmt.Errorf("the netdra pod of node %s in namespace %s: %w", node, ns, err)
	}
	pods := slices.DeleteFunc(l.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	switch len(pods) {
	case 0:
		return nil, fmt.Errorf("no pod %s on node %s in namespace %s (is netdra installed there? -n names its namespace)", NodePodLabel, node, ns)
	case 1:
		return &pods[0], nil
	}
	return nil, fmt.Errorf("%d pods %s on node %s in namespace %s", len(pods), NodePodLabel, node, ns)
}

// Containers are the pod's containers by name, as report wants them.
func Containers(p *corev1.Pod) map[string]report.Container {
	out := map[string]report.Container{}
	for _, c := range p.Spec.Containers {
		out[c.Name] = report.Container{Image: c.Image}
	}
	for _, s := range p.Status.ContainerStatuses {
		c := out[s.Name]
		c.ImageID, c.Ready, c.Restarts = s.ImageID, s.Ready, s.RestartCount
		out[s.Name] = c
	}
	return out
}

// Slices lists the driver's ResourceSlices of node.
func (c *Client) Slices(ctx context.Context, driver, node string) ([]resourceapi.ResourceSlice, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("spec.driver", driver), fields.OneTermEqualSelector("spec.nodeName", node))
	l, err := c.Kube.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: sel.String()})
	if err != nil {
		return nil, fmt.Errorf("ResourceSlices of %s on %s: %w", driver, node, err)
	}
	return l.Items, nil
}

// PodNames maps the UIDs of the pods the claims are reserved for to
// namespace/name; a claim that is gone is skipped.
func (c *Client) PodNames(ctx context.Context, claims [][2]string) (map[string]string, error) {
	out := map[string]string{}
	for _, k := range claims {
		rc, err := c.Kube.ResourceV1().ResourceClaims(k[0]).Get(ctx, k[1], metav1.GetOptions{})
		if isNotFound(err) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("claim %s/%s: %w", k[0], k[1], err)
		}
		for _, r := range rc.Status.ReservedFor {
			if r.Resource == "pods" {
				out[string(r.UID)] = rc.Namespace + "/" + r.Name
			}
		}
	}
	return out, nil
}

// ClaimsInput reads what report.BuildClaims needs: every claim, the
// DeviceClasses that select a device of drivers, the pods of the
// namespaces of netdra's claims and the Warning events there.
func (c *Client) ClaimsInput(ctx context.Context, drivers map[string]bool) (report.ClaimsInput, error) {
	in := report.ClaimsInput{Drivers: drivers, Classes: map[string]bool{}}
	classes, err := c.Kube.ResourceV1().DeviceClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing DeviceClasses: %w", err)
	}
	for _, dc := range classes.Items {
		if selectsDriver(dc, drivers) {
			in.Classes[dc.Name] = true
		}
	}
	claims, err := c.Kube.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("listing ResourceClaims: %w", err)
	}
	in.Claims = claims.Items
	namespaces := map[string]bool{}
	for _, rc := range report.BuildClaims(in) {
		namespaces[rc.Namespace] = true
	}
	warnings := fields.OneTermEqualSelector("type", corev1.EventTypeWarning).String()
	for ns := range namespaces {
		pods, err := c.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return in, fmt.Errorf("listing the pods of %s: %w", ns, err)
		}
		in.Pods = append(in.Pods, pods.Items...)
		events, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: warnings})
		if err != nil {
			return in, fmt.Errorf("listing the events of %s: %w", ns, err)
		}
		in.Events = append(in.Events, events.Items...)
	}
	return in, nil
}

// selectsDriver says a DeviceClass's CEL selectors name one of drivers.
func selectsDriver(dc resourceapi.DeviceClass, drivers map[string]bool) bool {
	for _, s := range dc.Spec.Selectors {
		if s.CEL == nil {
			continue
		}
		for d := range drivers {
			if strings.Contains(s.CEL.Expression, `"`+d+`"`) {
				return true
			}
		}
	}
	return false
}
