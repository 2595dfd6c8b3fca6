package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
)

// The demo's objects.
const (
	driverName    = v1alpha1.DefaultDriverName
	poolName      = "demo"
	className     = "demo.netdra.io"
	templateName  = "demo-net"
	podName       = "demo"
	podNamespace  = metav1.NamespaceDefault
	containerName = "app"
)

// What the claim asks for net1, checked in the pod.
const (
	wantIfName  = "net1"
	wantMAC     = "02:00:00:00:d0:01"
	wantMTU     = 1400
	wantIPv4    = "10.40.0.2/24"
	wantIPv6    = "fd00:40::2/64"
	wantRoute   = "10.41.0.0/16"
	wantGateway = "10.40.0.1"
)

var nodeConfigs = v1alpha1.GroupVersion.WithResource("nodeconfigs")

// connect makes the API clients from the world's kubeconfig.
func (d *demo) connect(context.Context) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", d.env["KUBECONFIG"])
	if err != nil {
		return fmt.Errorf("the world's kubeconfig: %w", err)
	}
	d.restCfg = cfg
	if d.client, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	d.dyn, err = dynamic.NewForConfig(cfg)
	return err
}

// nodeConfig is the demo's NodeConfig: the host manager offers the demo
// links, in one pool.
func (c *config) nodeConfig() *v1alpha1.NodeConfig {
	var names []string
	for _, l := range c.links() {
		names = append(names, l[0])
	}
	return &v1alpha1.NodeConfig{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "NodeConfig"},
		ObjectMeta: metav1.ObjectMeta{Name: c.nodeName},
		Spec: v1alpha1.NodeConfigSpec{
			DeviceManagerConfigs: &v1alpha1.DeviceManagerConfigs{Host: &v1alpha1.HostConfig{Enabled: true, IfNames: names}},
			Pools: []v1alpha1.Pool{{Name: poolName, Filter: &v1alpha1.PoolFilter{
				DeviceManagers: []v1alpha1.DeviceManager{v1alpha1.DeviceManagerHost}}}},
		},
	}
}

// deviceClass selects the devices of the demo pool.
func deviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: className}, Spec: resourceapi.DeviceClassSpec{
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{
			Expression: fmt.Sprintf(`device.driver == %q && device.attributes[%q].pool == %q`, driverName, driverName, poolName)}}}}}
}

// claimParams is the opaque configuration of the demo claim.
func claimParams() map[string]any {
	return map[string]any{
		"podIfName": wantIfName, "mac": wantMAC, "mtu": wantMTU,
		"addresses": []string{wantIPv4, wantIPv6},
		"routes":    []map[string]string{{"destination": wantRoute, "gateway": wantGateway}},
	}
}

// claimTemplate asks for one device of the demo class, configured by
// claimParams.
func claimTemplate() *resourceapi.ResourceClaimTemplate {
	raw, _ := json.Marshal(claimParams())
	return &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Name: templateName, Namespace: podNamespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "net", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: className}}},
			Config: []resourceapi.DeviceClaimConfiguration{{Requests: []string{"net"}, DeviceConfiguration: resourceapi.DeviceConfiguration{
				Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: driverName, Parameters: runtime.RawExtension{Raw: raw}}}}},
		}}}}
}

// pod uses a claim from the template, on the demo node. Its container is
// the real node's test app (imported by the node, never pulled: no
// registry), which prints what it sees of its network to its log; it
// stops at once on SIGTERM. It requires netdra's NRI plugin, as a user of
// netdra's fail-closed writes it: NRI's default validator (on in the real
// node's containerd) creates no container of it while nri is not
// connected.
func (c *config) pod() *corev1.Pod {
	tmpl := templateName
	grace := int64(2)
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName, Namespace: podNamespace,
		Annotations: map[string]string{realnode.RequiredPluginsAnnotation: `["netdra"]`}}, Spec: corev1.PodSpec{
		NodeSelector:                  map[string]string{corev1.LabelHostname: c.nodeName},
		ResourceClaims:                []corev1.PodResourceClaim{{Name: "net", ResourceClaimTemplateName: &tmpl}},
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{Name: containerName, Image: realnode.TestAppImage, ImagePullPolicy: corev1.PullNever,
			Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "net"}}}}},
	}}
}

// applyConfig installs the CRDs and creates the NodeConfig, the
// DeviceClass and the ResourceClaimTemplate. They go with the cluster.
func (d *demo) applyConfig(ctx context.Context) error {
	if err := d.installCRDs(ctx); err != nil {
		return err
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d.c.nodeConfig())
	if err != nil {
		return err
	}
	if _, err := d.dyn.Resource(nodeConfigs).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating NodeConfig %s: %w", d.c.nodeName, err)
	}
	if _, err := d.client.ResourceV1().DeviceClasses().Create(ctx, deviceClass(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating DeviceClass %s: %w", className, err)
	}
	if _, err := d.client.ResourceV1().ResourceClaimTemplates(podNamespace).Create(ctx, claimTemplate(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating ResourceClaimTemplate %s: %w", templateName, err)
	}
	d.say("applied NodeConfig %s (host manager: %s; pool %s), DeviceClass %s, ResourceClaimTemplate %s/%s",
		d.c.nodeName, strings.Join(d.c.nodeConfig().Spec.DeviceManagerConfigs.Host.IfNames, ", "), poolName,
		className, podNamespace, templateName)
	return nil
}

// installCRDs creates netdra's CRDs and waits until they are served.
func (d *demo) installCRDs(ctx context.Context) error {
	names, err := crds.Install(ctx, d.restCfg, d.c.crds)
	if err != nil {
		return err
	}
	d.say("applied the CRDs from %s: %s", d.c.crds, strings.Join(names, ", "))
	return nil
}

// poll checks cond every 100ms until it holds, ctx ends or the timeout
// passes; the error names what was awaited and cond's last error.
func (d *demo) poll(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	var last error
	ctx, cancel := context.WithTimeout(ctx, d.c.timeout)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		ok, err := cond(ctx)
		if err != nil {
			last = err
		}
		return ok, nil
	})
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no %s after %s (last error: %v)", what, d.c.timeout, last)
		}
		return err
	}
	return nil
}

// waitDriver waits until nri is connected to the runtime, dra registered
// with the kubelet and the demo pool published with every demo device.
func (d *demo) waitDriver(ctx context.Context) error {
	nriConn, err := rpc.Dial(d.socket("nri"))
	if err != nil {
		return err
	}
	defer nriConn.Close()
	draConn, err := rpc.Dial(d.socket("dra"))
	if err != nil {
		return err
	}
	defer draConn.Close()
	nri, dra := nriv1.NewNriServiceClient(nriConn), drav1.NewDraServiceClient(draConn)
	err = d.procs["nri"].waitUntil(ctx, "connection to the NRI runtime", d.c.timeout, func(ctx context.Context) (bool, error) {
		st, err := nri.Status(ctx, &nriv1.StatusRequest{})
		return err == nil && st.GetConnected(), err
	})
	if err != nil {
		return err
	}
	d.say("nri connected to the runtime's NRI socket %s", d.env["TESTWORLD_NRI_SOCKET"])
	err = d.procs["dra"].waitUntil(ctx, "registration with the kubelet", d.c.timeout, func(ctx context.Context) (bool, error) {
		st, err := dra.Status(ctx, &drav1.StatusRequest{})
		return err == nil && st.GetRegistered(), err
	})
	if err != nil {
		return err
	}
	var devices []string
	err = d.procs["dra"].waitUntil(ctx, fmt.Sprintf("ResourceSlice of pool %s with %d devices", poolName, d.c.devices), d.c.timeout,
		func(ctx context.Context) (bool, error) {
			slices, err := d.client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, err
			}
			devices = devices[:0]
			for _, s := range slices.Items {
				if s.Spec.Driver == driverName && s.Spec.Pool.Name == d.c.nodeName+"/"+poolName && s.Spec.NodeName != nil && *s.Spec.NodeName == d.c.nodeName {
					for _, dev := range s.Spec.Devices {
						devices = append(devices, dev.Name)
					}
				}
			}
			return len(devices) == d.c.devices, nil
		})
	if err != nil {
		return err
	}
	sort.Strings(devices)
	d.say("dra registered with the kubelet and published pool %s: %s", poolName, strings.Join(devices, ", "))
	return nil
}

// createPod creates the demo pod; at exit it is deleted first, and its
// device must come back to the host.
func (d *demo) createPod(ctx context.Context) error {
	if _, err := d.client.CoreV1().Pods(podNamespace).Create(ctx, d.c.pod(), metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating pod %s/%s: %w", podNamespace, podName, err)
	}
	d.onExit("deleting pod "+podName, d.deletePod)
	d.say("created pod %s/%s claiming one device of class %s", podNamespace, podName, className)
	return nil
}

// deletePod deletes the pod, waits until the node let it go (sandbox
// stopped, claim unprepared) and checks its device is back in the host.
func (d *demo) deletePod() error {
	// With a node process gone the node cannot let the pod go: do not
	// wait long; stopping the world tears its sandbox down anyway.
	bound := 2 * time.Minute
	for _, p := range append(d.procList(), d.world) {
		if !p.running() {
			bound = 15 * time.Second
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	d.say("deleting pod %s/%s: nri detaches its device, dra frees it", podNamespace, podName)
	err := d.client.CoreV1().Pods(podNamespace).Delete(ctx, podName, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := d.client.CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		return fmt.Errorf("pod %s/%s still there after %s: %w", podNamespace, podName, bound, err)
	}
	var back []string
	for i, l := range d.c.links() {
		got, err := d.hostLink(l[0])
		if err != nil {
			return fmt.Errorf("%s is not back in the host netns after the pod went: %w", l[0], err)
		}
		if mac := demoMAC(i); got.Address != mac || got.MTU != demoMTU {
			return fmt.Errorf("%s is back as %s mtu %d, want it as it was: %s mtu %d", l[0], got.Address, got.MTU, mac, demoMTU)
		}
		back = append(back, l[0])
	}
	d.say("pod gone; %s back in the host netns with their own MAC and MTU", strings.Join(back, ", "))
	return nil
}

// waitPod waits for the pod to run (when it does not, it says why), asks
// containerd for its network namespace and waits for its container's
// first dump of its network in its log.
func (d *demo) waitPod(ctx context.Context) error {
	var pod *corev1.Pod
	err := d.poll(ctx, "pod Running", func(ctx context.Context) (bool, error) {
		p, err := d.client.CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, d.events(context.Background()))
	}
	if d.podNetns, err = realnode.SandboxNetns(ctx, d.env["TESTWORLD_CONTAINERD_SOCKET"], pod.UID); err != nil {
		return err
	}
	d.podLog = realnode.ContainerLogPath(d.env["TESTWORLD_NODE_DIR"], pod.Namespace, pod.Name, pod.UID, containerName, 0)
	return d.poll(ctx, "first dump of its network in the container's log "+d.podLog, func(context.Context) (bool, error) {
		log, err := realnode.ReadContainerLog(d.podLog)
		if err != nil {
			return false, err
		}
		d.podView, err = firstDump(log)
		return err == nil, err
	})
}

// events lists the demo namespace's events, to say why a pod does not run.
func (d *demo) events(ctx context.Context) string {
	evs, err := d.client.CoreV1().Events(podNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "events: " + err.Error()
	}
	var b strings.Builder
	b.WriteString("events in namespace " + podNamespace + ":\n")
	for _, e := range evs.Items {
		fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// claim returns the pod's generated claim.
func (d *demo) claim(ctx context.Context) (*resourceapi.ResourceClaim, error) {
	pod, err := d.client.CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(pod.Status.ResourceClaimStatuses) != 1 || pod.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil, fmt.Errorf("pod %s has no generated claim in its status: %+v", podName, pod.Status.ResourceClaimStatuses)
	}
	return d.client.ResourceV1().ResourceClaims(podNamespace).Get(ctx, *pod.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
}

// claimStatusYAML is the claim's status as kubectl -o yaml shows it.
func claimStatusYAML(claim *resourceapi.ResourceClaim) (string, error) {
	b, err := yaml.Marshal(map[string]any{"status": claim.Status})
	return string(b), err
}
