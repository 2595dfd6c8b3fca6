package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/testinfra/grpcurltest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_Install follows docs/install.md ("Installing on a cluster") on
// a real node, as written: make images-load into the node's containerd, an
// overlay pointing at the local images, kubectl apply --server-side -k,
// rollout status of the DaemonSet (5/5 containers ready: their exec
// probes pass) and of the operator (2 replicas, leader election), both
// running under their own ServiceAccounts with projected tokens and the
// RBAC of pods/base; the node labelled, a ClusterConfig with a pool of
// host veths, a pod with a claim Running with net1 (kubectl logs of its
// container), the health subcommands through kubectl exec, grpcurl on
// the emptyDir's host path, the metrics; the state and then the dra
// container killed while a pod with a claim starts, the dra kill ridden
// out on the held kubelet sockets (containerRestartsRidden); a roll to
// new image tags; then the uninstall: every device
// back as it was, nothing of netdra left on the node but the state file.
func TestE2E_Install(t *testing.T) {
	testenv.RequireRoot(t, "runs a real node and hands host veths to pods")
	t0 := time.Now()
	cp := worldtest.ControlPlane(t)
	n := worldtest.Node(t, cp)
	in := newInstaller(t, cp, n)
	links := hostVeths(t, "ndin", 2)
	bpfBefore := bpfTree()

	const tag = "e2e-1"
	in.loadImages(t, tag)
	overlay := in.writeOverlay(t, tag)
	t.Cleanup(func() { in.forceUninstall(t, overlay) })
	step := time.Now()
	in.k(t, "apply", "--server-side", "-k", overlay)
	in.k(t, "-n", in.ns, "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", in.ns, "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	in.holderHealthy(t)
	t.Logf("installed and rolled out in %s:\n%s", time.Since(step).Round(time.Millisecond),
		in.k(t, "-n", in.ns, "get", "pods", "-o", "wide"))
	nodePod := in.nodePod(t)

	step = time.Now()
	in.configure(t, links)
	pod := in.demoPod(t)
	t.Logf("configured, pod Running with net1 in %s", time.Since(step).Round(time.Millisecond))
	in.lookInside(t, nodePod, pod)
	if names := containerNames(nodePod); !slices.Equal(names, []string{"provisioner", "state", "dra", "nri"}) {
		t.Errorf("netdra-node's containers %v: want the four processes", names)
	}
	in.holderHealthy(t)

	step = time.Now()
	restartRide := in.containerRestartsRidden(t)
	t.Logf("state and dra containers killed and restarted by the kubelet with pods starting, in %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	in.loadImages(t, "e2e-2")
	nodePod = in.roll(t, ":e2e-2", nodePod, pod, restartRide, func() {
		in.k(t, "apply", "--server-side", "-k", in.writeOverlay(t, "e2e-2"))
	})
	t.Logf("rolled to a new image tag with a pod holding a device, a new pod served, in %s", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	in.uninstall(t, overlay, links)
	in.checkNothingLeft(t, nodePod, bpfBefore, links)
	t.Logf("uninstalled in %s; whole walkthrough %s", time.Since(step).Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
}

// holderHealthy waits for the netdra-sockets DaemonSet's pod on the node
// to be Ready and checks that it holds dra's kubelet sockets: its health
// check, run as its probes run it, answers.
func (in *installer) holderHealthy(t *testing.T) {
	t.Helper()
	// kubectl rollout status does not follow an OnDelete DaemonSet.
	waitFor(t, "the netdra-sockets pod Ready", 3*time.Minute, func(context.Context) (bool, error) {
		p := in.holderPod(t)
		return p != nil && podReady(p), nil
	})
	in.k(t, "-n", in.ns, "exec", "ds/netdra-sockets", "-c", "dra-sockets", "--",
		"/usr/local/bin/dra", "sockets", "health", "-socket=/run/netdra-holder/dra-sockets.sock")
}

// holderPod is the netdra-sockets DaemonSet's pod on the node, nil when
// there is none (a release before the holder had a DaemonSet of its own).
func (in *installer) holderPod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := in.cp.Client().CoreV1().Pods(in.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=netdra-sockets", FieldSelector: "spec.nodeName=" + in.node.Name()})
	if err != nil || len(pods.Items) > 1 {
		t.Fatalf("the node's netdra-sockets pod: %v (%d pods)", err, len(pods.Items))
	}
	if len(pods.Items) == 0 {
		return nil
	}
	return &pods.Items[0]
}

// nodePod is the DaemonSet's pod on the node, with all its containers
// ready (their probes run each binary's health subcommand): the four
// processes', and dra-sockets from this tree on. A pod being deleted
// (a roll's previous one, still stopping) is not it.
func (in *installer) nodePod(t *testing.T) *corev1.Pod {
	t.Helper()
	pods, err := in.cp.Client().CoreV1().Pods(in.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=netdra-node", FieldSelector: "spec.nodeName=" + in.node.Name()})
	if err != nil {
		t.Fatalf("the node's netdra-node pod: %v", err)
	}
	pods.Items = slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
	if len(pods.Items) != 1 {
		t.Fatalf("the node's netdra-node pod: %d pods not being deleted", len(pods.Items))
	}
	p := &pods.Items[0]
	ready := 0
	for _, s := range p.Status.ContainerStatuses {
		if s.Ready {
			ready++
		}
	}
	if ready != len(p.Spec.Containers) || len(p.Spec.Containers) < 4 {
		t.Fatalf("netdra-node pod %s: %d/%d containers ready", p.Name, ready, len(p.Spec.Containers))
	}
	return p
}

// containerNames are the pod's containers' names, in order.
func containerNames(p *corev1.Pod) []string {
	var out []string
	for _, c := range p.Spec.Containers {
		out = append(out, c.Name)
	}
	return out
}

// configure is "Configure the nodes": label the node, a ClusterConfig
// whose pool this node can fill (host veths: the kernel here has no dummy
// module and no SR-IOV), the DeviceClasses of pods/examples; the operator
// writes the node's NodeConfig, dra applies it and publishes the devices.
func (in *installer) configure(t *testing.T, links []hostVeth) {
	t.Helper()
	in.k(t, "label", "node", in.node.Name(), "netdra.io/network=true")
	cc := filepath.Join(in.dir, "cluster-config.yaml")
	write(t, cc, fmt.Sprintf(`apiVersion: netdra.io/v1alpha1
kind: ClusterConfig
metadata:
  name: netdra-network-nodes
spec:
  nodeSelector:
    matchLabels:
      netdra.io/network: "true"
  spec:
    pools:
      - name: host-net
        filter:
          deviceManagers: ["host"]
    deviceManagerConfigs:
      host:
        enabled: true
        ifNames: [%s, %s]
`, links[0].name, links[1].name))
	in.k(t, "apply", "-f", cc)
	in.k(t, "apply", "-f", filepath.Join(in.repo, "pods/examples/device-classes.yaml"))
	in.k(t, "wait", "--for=create", "nodeconfig/"+in.node.Name(), "--timeout=2m")
	in.k(t, "wait", "--for=condition=Applied", "nodeconfig/"+in.node.Name(), "--timeout=2m")
	t.Logf("kubectl get clusterconfigs,nodeconfigs:\n%s", in.k(t, "get", "clusterconfigs,nodeconfigs"))
	waitFor(t, "the node's two host devices in its ResourceSlices", 2*time.Minute, func(ctx context.Context) (bool, error) {
		out, err := in.try(20*time.Second, in.kubectl, "get", "resourceslices", "--field-selector", "spec.driver="+driver+",spec.nodeName="+in.node.Name(), "-o", "yaml")
		return err == nil && strings.Contains(out, "string: "+links[0].name) && strings.Contains(out, "string: "+links[1].name), nil
	})
}

// roll rolls the DaemonSet and the operator to new images while pod holds
// a device: the pod keeps it (its container still sees net1 after the
// roll), and a pod created at the hand-over gets one: it runs with its
// net1. The roll surges: the next node pod starts beside the old one, its
// processes standing by, and the old one is deleted only once the new
// one is Ready. The pod is created the moment the old node pod is
// deleted, so that it meets the hand-over (the old processes' exit, the
// new ones' take-over) at its worst; its time from creation to Ready is
// logged beside restartRide's (a pod created as dra's container was
// killed), reported, not judged. upgrade applies the new images
// (kustomize's overlay, or helm upgrade), whose references contain image.
// roll returns the new node pod.
func (in *installer) roll(t *testing.T, image string, old, pod *corev1.Pod, restartRide time.Duration, upgrade func()) *corev1.Pod {
	t.Helper()
	holder := in.holderPod(t)
	c := in.cp.Client()
	upgrade()
	applied := time.Now()
	var during string
	var beside *corev1.Pod // the next node pod, when the old one was deleted
	waitFor(t, "the old node pod deleted", 3*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(in.ns).Get(ctx, old.Name, metav1.GetOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		if err == nil && p.DeletionTimestamp == nil {
			return false, nil
		}
		pods, err := c.CoreV1().Pods(in.ns).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/name=netdra-node", FieldSelector: "spec.nodeName=" + in.node.Name()})
		if err != nil {
			return false, err
		}
		for i := range pods.Items {
			if pods.Items[i].UID != old.UID {
				beside = &pods.Items[i]
			}
		}
		during = in.nodePods(t)
		return true, nil
	})
	deleted := time.Since(applied)
	manifest := in.demoManifest(t, "netdra-demo-2", "10.100.0.11/24")
	created := time.Now()
	in.k(t, "apply", "-f", manifest)
	if beside == nil || !podReady(beside) {
		t.Errorf("when the old node pod was deleted, the node's netdra-node pods were %s: want the next one beside it, Ready (maxSurge)", during)
	}
	in.k(t, "-n", "netdra-demo", "wait", "--for=condition=Ready", "pod/netdra-demo-2", "--timeout=3m")
	readyAfter := time.Since(created)
	in.k(t, "-n", in.ns, "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", in.ns, "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	cur := in.nodePod(t)
	if cur.UID == old.UID || !strings.Contains(cur.Spec.Containers[0].Image, image) {
		t.Fatalf("the DaemonSet did not roll: pod %s runs %s", cur.Name, cur.Spec.Containers[0].Image)
	}
	// The holder is left running (OnDelete): the kubelet's sockets stayed.
	if h := in.holderPod(t); holder != nil && (h == nil || h.UID != holder.UID || restarts(h) != restarts(holder)) {
		t.Errorf("the roll replaced or restarted the socket holder's pod %s (restarts %d): now %v", holder.Name, restarts(holder), h)
	}
	p2, err := in.cp.Client().CoreV1().Pods("netdra-demo").Get(context.Background(), "netdra-demo-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ride := "no figure"
	if restartRide > 0 {
		ride = restartRide.Round(time.Millisecond).String()
	}
	t.Logf("ROLL: the old node pod was deleted %s after the upgrade was applied (netdra-node pods then: %s); a pod created then was Ready %s after kubectl apply (by its own times, %s from creation to Ready), against %s for a pod created as dra's container was killed",
		deleted.Round(time.Millisecond), during, readyAfter.Round(time.Millisecond), podReadyAfter(p2), ride)
	in.logTimeline(t, applied, in.ns, "netdra-demo")
	rolled := time.Now()
	waitFor(t, "a dump of the demo pod's network after the roll", time.Minute, func(ctx context.Context) (bool, error) {
		log, err := in.try(20*time.Second, in.kubectl, "-n", "netdra-demo", "logs", "netdra-demo")
		return err == nil && lastDumpAfter(log, rolled) && strings.Contains(lastDump(log), "\n    inet 10.100.0.10/24\n"), nil
	})
	if p, err := in.cp.Client().CoreV1().Pods("netdra-demo").Get(context.Background(), pod.Name, metav1.GetOptions{}); err != nil || p.UID != pod.UID {
		t.Fatalf("the demo pod did not outlive the roll: %v", err)
	}
	waitFor(t, "a dump of the second pod's network after the roll", time.Minute, func(ctx context.Context) (bool, error) {
		log, err := in.try(20*time.Second, in.kubectl, "-n", "netdra-demo", "logs", "netdra-demo-2")
		return err == nil && lastDumpAfter(log, rolled) && strings.Contains(lastDump(log), "\n    inet 10.100.0.11/24\n"), nil
	})
	if p, err := in.cp.Client().CoreV1().Pods("netdra-demo").Get(context.Background(), "netdra-demo-2", metav1.GetOptions{}); err != nil || p.UID != p2.UID || p.Status.Phase != corev1.PodRunning {
		t.Fatalf("the pod created during the roll did not stay Running: %v", err)
	}
	return cur
}

// logTimeline logs the events of the namespaces from since on, oldest
// first, each at its offset from since (the kubelet's and the
// controllers' events carry whole seconds): where a roll's time went,
// from the DaemonSet's delete of the old pod to the new pod's containers
// and the claims' prepares.
func (in *installer) logTimeline(t *testing.T, since time.Time, namespaces ...string) {
	t.Helper()
	type line struct {
		at  time.Time
		txt string
	}
	var lines []line
	for _, ns := range namespaces {
		evs, err := in.cp.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Logf("the events of %s: %v", ns, err)
			continue
		}
		for _, e := range evs.Items {
			at := e.EventTime.Time
			if at.IsZero() {
				at = e.LastTimestamp.Time
			}
			if at.IsZero() {
				at = e.FirstTimestamp.Time
			}
			if at.Before(since.Truncate(time.Second)) {
				continue
			}
			lines = append(lines, line{at, fmt.Sprintf("%s/%s %s %s: %s", ns, e.InvolvedObject.Name, e.Type, e.Reason, e.Message)})
		}
	}
	slices.SortStableFunc(lines, func(a, b line) int { return a.at.Compare(b.at) })
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "\n  %+6.1fs %s", l.at.Sub(since).Seconds(), l.txt)
	}
	t.Logf("events from kubectl apply on (%d):%s", len(lines), b.String())
}

// restarts is the sum of p's containers' restart counts.
func restarts(p *corev1.Pod) int32 {
	var n int32
	for _, s := range p.Status.ContainerStatuses {
		n += s.RestartCount
	}
	return n
}

// nodePods says what the node's netdra-node pods are doing: each one's
// name, phase, whether it is terminating and how many of its containers
// are ready.
func (in *installer) nodePods(t *testing.T) string {
	t.Helper()
	pods, err := in.cp.Client().CoreV1().Pods(in.ns).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=netdra-node", FieldSelector: "spec.nodeName=" + in.node.Name()})
	if err != nil {
		t.Fatalf("the node's netdra-node pods: %v", err)
	}
	var out []string
	for _, p := range pods.Items {
		ready := 0
		for _, s := range p.Status.ContainerStatuses {
			if s.Ready {
				ready++
			}
		}
		what := fmt.Sprintf("%s %s %d/%d ready", p.Name, p.Status.Phase, ready, len(p.Spec.Containers))
		if p.DeletionTimestamp != nil {
			what += " terminating"
		}
		out = append(out, what)
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// podReadyAfter is the time from p's creation to its Ready condition, by
// the API server's times (whole seconds), or why there is none.
func podReadyAfter(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Sub(p.CreationTimestamp.Time).String()
		}
	}
	return "(not Ready)"
}

// lastDump is the test app's last complete dump in its log.
func lastDump(log string) string {
	end := strings.LastIndex(log, "testapp end ")
	if end < 0 {
		return ""
	}
	start := strings.LastIndex(log[:end], "testapp dump ")
	return log[max(start, 0):end]
}

// lastDumpAfter reports whether the log's last dump is one written after
// t: the test app dumps every DUMP_INTERVAL (1s here) and kubectl logs
// gives no times, so 3 s after t with dumps still coming.
func lastDumpAfter(log string, t time.Time) bool {
	return strings.Count(log, "testapp end ") > 2 && time.Since(t) > 3*time.Second
}

// demoPod is "Claim a device from a pod", with the test app instead of
// busybox (no registry here) and the host-net pool: Running, and its
// container's own log shows net1 as the claim asks.
func (in *installer) demoPod(t *testing.T) *corev1.Pod {
	t.Helper()
	in.k(t, "apply", "-f", in.demoManifest(t, "netdra-demo", "10.100.0.10/24"))
	in.k(t, "-n", "netdra-demo", "wait", "--for=condition=Ready", "pod/netdra-demo", "--timeout=2m")
	var log string
	waitFor(t, "the demo pod's dump of its network (kubectl logs)", time.Minute, func(ctx context.Context) (bool, error) {
		out, err := in.try(20*time.Second, in.kubectl, "-n", "netdra-demo", "logs", "netdra-demo")
		log = out
		return err == nil && strings.Contains(out, "testapp end 1\n"), nil
	})
	requireLines(t, "the demo pod's container", log, ": net1: <up", "mtu 1400 hw ", "\n    inet 10.100.0.10/24\n",
		"route 10.250.0.0/16 via 10.100.0.1 dev net1")
	claims := in.k(t, "-n", "netdra-demo", "get", "resourceclaims", "-o", "yaml")
	requireLines(t, "the claim's status", claims, "interfaceName: net1", "reason: DevicePrepared")
	pod, err := in.cp.Client().CoreV1().Pods("netdra-demo").Get(context.Background(), "netdra-demo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return pod
}

// demoManifest writes the demo: its namespace, a claim template for one
// host-net device as net1 with address, and the pod name using it.
func (in *installer) demoManifest(t *testing.T, name, address string) string {
	t.Helper()
	path := filepath.Join(in.dir, name+".yaml")
	m := strings.NewReplacer("POD", name, "ADDRESS", address).Replace(`apiVersion: v1
kind: Namespace
metadata:
  name: netdra-demo
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata:
  name: POD
  namespace: netdra-demo
spec:
  spec:
    devices:
      requests:
        - name: net
          exactly:
            deviceClassName: host-net.netdra.io
      config:
        - requests: ["net"]
          opaque:
            driver: netdra.io
            parameters:
              podIfName: net1
              mtu: 1400
              addresses: ["ADDRESS"]
              routes:
                - destination: 10.250.0.0/16
                  gateway: 10.100.0.1
---
apiVersion: v1
kind: Pod
metadata:
  name: POD
  namespace: netdra-demo
spec:
  resourceClaims:
    - name: net
      resourceClaimTemplateName: POD
  terminationGracePeriodSeconds: 5
  containers:
    - name: app
      image: localhost/netdra-realnode/testapp:1
      imagePullPolicy: Never
      env:
        - {name: DUMP_INTERVAL, value: 1s}
      resources:
        claims:
          - name: net
      securityContext:
        allowPrivilegeEscalation: false
        runAsNonRoot: true
        runAsUser: 65534
        capabilities:
          drop: ["ALL"]
`)
	write(t, path, m)
	return path
}

// lookInside is "Look inside each process": each binary's health
// subcommand through kubectl exec, grpcurl as root on the emptyDir's host
// path, the metrics on the node.
func (in *installer) lookInside(t *testing.T, nodePod, pod *corev1.Pod) {
	t.Helper()
	for _, c := range []string{"provisioner", "state", "dra", "nri"} {
		in.k(t, "-n", in.ns, "exec", "ds/netdra-node", "-c", c, "--",
			"/usr/local/bin/"+c, "health", "-socket=/run/netdra/"+c+".sock")
	}
	// Through a short link to the emptyDir's host path (docs/operations.md's
	// /run/netdra-sockets; here one of the test's own): the sockets' full
	// paths are too long for a unix socket address.
	s := filepath.Join(in.dir, "s")
	in.run(t, time.Minute, "ln", "-sfn", filepath.Join(in.node.KubeletDir(), "pods", string(nodePod.UID), "volumes/kubernetes.io~empty-dir/sockets"), s)
	g := grpcurltest.Binary(t)
	for _, c := range []string{"provisioner", "state", "dra", "nri"} {
		if out := grpcurltest.Call(t, g, filepath.Join(s, c+".sock"), "", "list"); !strings.Contains(out, "netdra."+c+".v1.") {
			t.Errorf("grpcurl list on %s.sock: %s", c, out)
		}
	}
	requireLines(t, "the provisioner's WatchDevices", grpcurltest.Stream(g, filepath.Join(s, "provisioner.sock"), "", 2*time.Second,
		"netdra.provisioner.v1.ProvisionerService/WatchDevices"), `"ndin1"`)
	requireLines(t, "state's Dump", grpcurltest.Call(t, g, filepath.Join(s, "state.sock"), "", "netdra.state.v1.StateService/Dump"),
		string(pod.UID))
	grpcurltest.Call(t, g, filepath.Join(s, "dra.sock"), "", "netdra.dra.v1.DraService/Status")
	grpcurltest.Call(t, g, filepath.Join(s, "nri.sock"), "", "netdra.nri.v1.NriService/Status")
	for i, who := range []string{"dra", "nri", "state", "provisioner"} {
		body := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/metrics", in.ports[i]))
		if !strings.Contains(body, "\nnetdra_") {
			t.Errorf("%s's metrics have no netdra_ series:\n%.2000s", who, body)
		}
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// uninstall is "Uninstall": the pods first (their devices go back to the
// host), then the overlay.
func (in *installer) uninstall(t *testing.T, overlay string, links []hostVeth) {
	t.Helper()
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo-2.yaml"), "--ignore-not-found", "--timeout=2m")
	in.k(t, "delete", "-f", filepath.Join(in.dir, "netdra-demo.yaml"), "--ignore-not-found", "--timeout=2m")
	for _, l := range links {
		if err := l.asBefore(); err != nil {
			t.Errorf("after the demo pod's deletion: %v", err)
		}
	}
	// Free takes netdra's programs off in the background, after it
	// returned.
	waitFor(t, "netdra's eBPF programs off the freed devices", time.Minute, func(context.Context) (bool, error) {
		return len(netdraPrograms(t, "", names(links)...)) == 0, nil
	})
	// The kubelet plugin helper removes a claim's device metadata once
	// dra's unprepare of it returned, after the Free that took the
	// programs off: the unprepares are over when none is left.
	meta := filepath.Join(in.node.KubeletDir(), "plugins/netdra.io/dra-device-metadata")
	waitFor(t, "the claims' device metadata removed (the kubelet's unprepares returned)", time.Minute, func(context.Context) (bool, error) {
		left, err := os.ReadDir(meta)
		return len(left) == 0 || errors.Is(err, fs.ErrNotExist), nil
	})
	in.k(t, "delete", "-f", filepath.Join(in.repo, "pods/examples/device-classes.yaml"), "--ignore-not-found")
	in.k(t, "delete", "-f", filepath.Join(in.dir, "cluster-config.yaml"), "--ignore-not-found")
	in.run(t, 4*time.Minute, in.kubectl, "delete", "-k", overlay, "--timeout=3m")
}

// checkNothingLeft checks the node after the uninstall: no netdra pod or
// container, dra's sockets gone from the kubelet's directories, nothing
// new on the bpffs, none of netdra's programs on any interface of the
// host (tcx, tc), the devices as before, and the state file kept.
func (in *installer) checkNothingLeft(t *testing.T, nodePod *corev1.Pod, bpfBefore []string, links []hostVeth) {
	t.Helper()
	waitFor(t, "the netdra-node pod gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		_, err := in.cp.Client().CoreV1().Pods(in.ns).Get(ctx, nodePod.Name, metav1.GetOptions{})
		return err != nil, nil
	})
	waitFor(t, "the netdra-sockets pod gone", 2*time.Minute, func(context.Context) (bool, error) {
		return in.holderPod(t) == nil, nil
	})
	if out := in.run(t, time.Minute, in.ctr, "--address", in.node.ContainerdSocket(), "-n", "k8s.io", "tasks", "ls"); strings.Contains(out, "netdra") {
		t.Errorf("containerd still runs netdra tasks:\n%s", out)
	}
	for _, dir := range []string{filepath.Join(in.node.KubeletDir(), "plugins_registry"), filepath.Join(in.node.KubeletDir(), "plugins/netdra.io")} {
		if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) > 0 {
			t.Errorf("left in %s: %v", dir, left)
		}
	}
	for _, p := range bpfTree() {
		if !slices.Contains(bpfBefore, p) {
			t.Errorf("left on the host's bpffs: %s", p)
		}
	}
	for _, p := range netdraPrograms(t, "", names(links)...) {
		t.Errorf("left on an interface of the host: %s", p)
	}
	if _, err := os.Stat(filepath.Join(in.node.Dir(), "netdra-state", "state.db")); err != nil {
		t.Errorf("the state file is not kept: %v", err)
	}
}

// forceUninstall removes what a failed run left: the namespaces go without
// waiting, so that the node's drain is not fought by the DaemonSet; overlay
// is empty after a Helm install (its own cleanup uninstalls).
func (in *installer) forceUninstall(t *testing.T, overlay string) {
	if t.Failed() {
		for _, sel := range []string{"ds/netdra-node", "ds/netdra-sockets", "deploy/netdra-operator"} {
			out, _ := in.try(time.Minute, in.kubectl, "-n", in.ns, "logs", sel, "--all-containers", "--prefix", "--tail=40")
			t.Logf("kubectl logs %s:\n%s", sel, out)
		}
		// Why a container did not start (CreateContainerError, a failed
		// mount) is in the kubelet's events, not in any log.
		out, _ := in.try(time.Minute, in.kubectl, "-n", in.ns, "get", "events", "--sort-by=.lastTimestamp")
		t.Logf("the events of %s:\n%s", in.ns, out)
	}
	// The demo pod first, while netdra runs: its device goes back.
	for _, demo := range []string{"netdra-demo-2.yaml", "netdra-demo.yaml"} {
		if _, err := os.Stat(filepath.Join(in.dir, demo)); err == nil {
			_, _ = in.try(time.Minute, in.kubectl, "delete", "-f", filepath.Join(in.dir, demo), "--ignore-not-found", "--timeout=50s")
		}
	}
	if overlay != "" {
		_, _ = in.try(2*time.Minute, in.kubectl, "delete", "-k", overlay, "--ignore-not-found", "--wait=false")
	}
	_, _ = in.try(time.Minute, in.kubectl, "delete", "clusterconfigs,deviceclasses", "--all", "--ignore-not-found", "--wait=false")
}
