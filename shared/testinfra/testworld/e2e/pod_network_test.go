package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// The DHCP network of the pod-network test: dnsmasq on a bridge of the
// host netns that the host-side peers of the devices are enslaved to.
const (
	dhcpBridge = "br-dh"
	dhcpServer = "10.77.0.1"
	dhcpFirst  = "10.77.0.50"
	dhcpLast   = "10.77.0.60"
	dhcpMTU    = 1400
)

// TestE2E_PodNetwork is a pod whose claim configures its network beyond
// the interface on the real node: net1 takes its
// address and MTU from a real DHCP server (dnsmasq in the host netns), is
// enslaved to a VRF, and gets a policy rule, a route in the rule's table,
// a permanent neighbour and two sysctls. The container sees each by exec
// (`testapp net`). Deleting the pod brings the device back as it was and
// releases the lease (dnsmasq's lease file loses it).
//
// This kernel may have no VRF devices (CONFIG_NET_VRF unset, no modules):
// then the VRF is left out of the running pod's claim, and a second pod
// whose claim has it never runs: its attach is refused naming vrf, its
// device back in the host unchanged. The claims say so: the running pod's
// has Attached=True on its device, the refused one's Attached=False
// naming vrf and one AttachFailed Warning event, however many times the
// kubelet retried.
func TestE2E_PodNetwork(t *testing.T) {
	t0 := time.Now()
	haveVRF := kernelHasVRF(t)
	nn := startNetdra(t, "dh0", "dh1")
	c := nn.cp.Client()
	before := map[string]ipLink{}
	for _, d := range []string{"dh0", "dh1"} {
		l, ok := link(t, nn.hostNS, d)
		if !ok {
			t.Fatalf("no %s in the host netns", d)
		}
		before[d] = l
	}
	leases := startDHCPServer(t, nn.hostNS, "p-dh0", "p-dh1")
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"dh0", "dh1"}}},
		"pools":                []any{map[string]any{"name": "dhcp"}},
	})
	// Pods made before the devices are published wait for the
	// scheduler's backoff.
	nn.waitStatus(t, "both devices published", func(nc *v1alpha1.NodeConfig) bool { return pools(nc) == "dhcp=2" })
	t.Logf("devices published after %s", time.Since(t0).Round(100*time.Millisecond))
	ns := worldtest.Namespace(t, c)
	class := deviceClass(t, c, "dhcp")
	params := map[string]any{
		"apiVersion": "netdra.io/v1alpha1", "kind": "NetworkConfig",
		"podIfName": "net1",
		"dhcp":      true,
		"rules":     []any{map[string]any{"priority": 100, "from": "10.77.0.0/24", "table": 100}},
		"routes":    []any{map[string]any{"destination": "10.88.0.0/16", "gateway": dhcpServer, "table": 100}},
		"neighbors": []any{map[string]any{"address": "10.77.0.9", "mac": "02:00:00:00:77:09"}},
		"sysctls":   map[string]any{"ipv4.arp_ignore": 1, "ipv4.rp_filter": 2},
	}
	vrf := map[string]any{"name": "red", "table": 100}
	var refused *corev1.Pod
	var refusedNS string
	if haveVRF {
		params["vrf"] = vrf
	} else {
		refusedNS = worldtest.Namespace(t, c) // a claim template per namespace
		withVRF := map[string]any{"vrf": vrf}
		for k, v := range params {
			withVRF[k] = v
		}
		refused = newPod(t, c, refusedNS, "vrf", nn.node.Name(), claimTemplate(t, c, refusedNS, class, withVRF))
	}
	pod := newPod(t, c, ns, "app", nn.node.Name(), claimTemplate(t, c, ns, class, params))
	waitFor(t, "the pod to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
		p, err := c.CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	t.Logf("pod running after %s", time.Since(t0).Round(100*time.Millisecond))
	mine, other := "dh0", "dh1"
	if _, ok := link(t, nn.hostNS, mine); ok {
		mine, other = other, mine
	}
	mac := before[mine].Address

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, code, err := nn.node.Exec(ctx, pod.UID, "app", "/testapp", "net", "net1",
		"net.ipv4.conf.net1.arp_ignore", "net.ipv4.conf.net1.rp_filter")
	if err != nil || code != 0 {
		t.Fatalf("exec testapp net net1: %v (exit %d): %s", err, code, out)
	}
	t.Logf("the container sees:\n%s", out)
	want := []string{
		fmt.Sprintf("link net1 mtu %d hw %s ", dhcpMTU, mac),
		"rule 100: from 10.77.0.0/24 lookup 100\n",
		"route table 100 10.88.0.0/16 via " + dhcpServer + " dev net1 ",
		"neigh 10.77.0.9 lladdr 02:00:00:00:77:09 PERMANENT\n",
		"sysctl net.ipv4.conf.net1.arp_ignore = 1\n",
		"sysctl net.ipv4.conf.net1.rp_filter = 2\n",
	}
	if haveVRF {
		want = append(want, "master red vrf table 100\n")
	}
	requireLines(t, "the container", out, want...)
	// The claim says the device is in the pod.
	waitFor(t, "the claim's Attached=True", 30*time.Second, func(ctx context.Context) (bool, error) {
		cond, err := attachedCondition(ctx, c, pod)
		return err == nil && cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == "Attached", nil
	})
	addr := dhcpAddress(t, out)
	if l := leases(); !strings.Contains(l, mac) || !strings.Contains(l, " "+addr.String()+" ") {
		t.Errorf("dnsmasq's leases have no %s for %s:\n%s", addr, mac, l)
	}

	if refused != nil {
		// The attach runs after the sandbox, in nri: its refusal keeps the
		// pod's containers from starting, and the pod's event says why.
		waitFor(t, "an event of the VRF pod naming vrf", time.Minute, func(ctx context.Context) (bool, error) {
			return podEventWith(ctx, c, refused, "vrf: this node's kernel has no VRF devices (CONFIG_NET_VRF)"), nil
		})
		// The claim's owner sees it on the claim: Attached=False naming
		// the field, and a Warning event; the kubelet's retries, each
		// refused the same way, add no second event.
		const vrfRefusal = "vrf: this node's kernel has no VRF devices (CONFIG_NET_VRF)"
		waitFor(t, "the VRF claim's Attached=False naming vrf", time.Minute, func(ctx context.Context) (bool, error) {
			cond, err := attachedCondition(ctx, c, refused)
			if err == nil && cond != nil && cond.Status != metav1.ConditionFalse {
				t.Logf("the VRF claim's Attached: %+v", cond)
			}
			return err == nil && cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "AttachFailed" &&
				strings.HasPrefix(cond.Message, vrfRefusal), nil
		})
		waitFor(t, "the VRF pod refused twice", 90*time.Second, func(ctx context.Context) (bool, error) {
			return podEventCount(ctx, c, refused, "vrf: ") >= 2, nil
		})
		var evs []corev1.Event
		waitFor(t, "an AttachFailed event on the VRF claim", 30*time.Second, func(ctx context.Context) (bool, error) {
			var err error
			evs, err = claimEvents(ctx, c, refused, "AttachFailed")
			return err == nil && len(evs) > 0, nil
		})
		if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Count > 1 || !strings.Contains(evs[0].Message, vrfRefusal) {
			for _, e := range evs {
				t.Logf("event: %s %s x%d: %s", e.Type, e.Reason, e.Count, e.Message)
			}
			t.Errorf("the VRF claim has %d AttachFailed events (above), want one Warning, once, naming vrf", len(evs))
		}
		// The kubelet retries the pod's start, and each retry attaches and
		// restores the device again: it is back in the host, as it was,
		// between attempts, not at every moment.
		waitFor(t, other+" back in the host as it was after the refused VRF claim", time.Minute, func(context.Context) (bool, error) {
			l, ok := link(t, nn.hostNS, other)
			if ok && fmt.Sprint(l) != fmt.Sprint(before[other]) {
				t.Logf("%s in the host = %+v, want %+v", other, l, before[other])
			}
			return ok && fmt.Sprint(l) == fmt.Sprint(before[other]), nil
		})
		if p, err := c.CoreV1().Pods(refusedNS).Get(context.Background(), refused.Name, metav1.GetOptions{}); err != nil {
			t.Error(err)
		} else {
			// The kubelet counts each refused start as a restart: the
			// container never ran when each of its ends is a StartError.
			ran := func(t *corev1.ContainerStateTerminated) bool { return t != nil && t.Reason != "StartError" }
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Running != nil || ran(cs.State.Terminated) || ran(cs.LastTerminationState.Terminated) {
					t.Errorf("container %s of the refused VRF claim's pod started: %+v", cs.Name, cs)
				}
			}
		}
	}

	t.Logf("deleting the pods after %s", time.Since(t0).Round(100*time.Millisecond))
	for _, p := range []*corev1.Pod{pod, refused} {
		if p != nil {
			if err := c.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, mine+" back in the host netns", 2*time.Minute, func(context.Context) (bool, error) {
		_, ok := link(t, nn.hostNS, mine)
		return ok, nil
	})
	t.Logf("%s back in the host after %s", mine, time.Since(t0).Round(100*time.Millisecond))
	for _, d := range []string{"dh0", "dh1"} {
		if l, _ := link(t, nn.hostNS, d); fmt.Sprint(l) != fmt.Sprint(before[d]) {
			t.Errorf("%s after the pod = %+v, want it as before: %+v", d, l, before[d])
		}
	}
	waitFor(t, "dnsmasq to drop the released lease", 30*time.Second, func(context.Context) (bool, error) {
		return !strings.Contains(leases(), mac), nil
	})
	t.Logf("pod network test took %s", time.Since(t0).Round(100*time.Millisecond))
}

// TestE2E_PodNetworkNoDHCPServer is a pod whose claim asks for DHCP on a
// network where no server answers: the DHCP network's bridge with no
// dnsmasq on it. Its attach fails when the client's wait for a lease ends,
// and again at each of the kubelet's retries: none of its containers ever
// starts and the pod is never Ready. Its owner reads why, naming DHCP and
// the interface, on the pod (a Warning event, its container's status), on
// the claim (Attached=False, reason AttachFailed) and in one AttachFailed
// Warning event of the claim.
// Between attempts the device is back in the host as it was; once the
// pod is deleted no allocation is left and the device is as before.
func TestE2E_PodNetworkNoDHCPServer(t *testing.T) {
	t0 := time.Now()
	nn := startNetdra(t, "dn0")
	c := nn.cp.Client()
	before, ok := link(t, nn.hostNS, "dn0")
	if !ok {
		t.Fatal("no dn0 in the host netns")
	}
	dhcpNetwork(t, nn.hostNS, "p-dn0")
	nn.applyNodeConfig(t, map[string]any{
		"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": []any{"dn0"}}},
		"pools":                []any{map[string]any{"name": "dhcp"}},
	})
	nn.waitStatus(t, "the device published", func(nc *v1alpha1.NodeConfig) bool { return pools(nc) == "dhcp=1" })
	ns := worldtest.Namespace(t, c)
	params := map[string]any{"apiVersion": "netdra.io/v1alpha1", "kind": "NetworkConfig", "podIfName": "net1", "dhcp": true}
	pod := newPod(t, c, ns, "app", nn.node.Name(), claimTemplate(t, c, ns, deviceClass(t, c, "dhcp"), params))

	// The provisioner's refusal, as the claim's owner reads it: it names
	// DHCP, the interface, and that no server answered.
	const noLease = "no DHCP server answered on net1"
	waitFor(t, "the claim's Attached=False naming DHCP", 2*time.Minute, func(ctx context.Context) (bool, error) {
		cond, err := attachedCondition(ctx, c, pod)
		return err == nil && cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == "AttachFailed" &&
			strings.Contains(cond.Message, noLease), nil
	})
	t.Logf("the claim says Attached=False after %s", time.Since(t0).Round(100*time.Millisecond))
	if cond, err := attachedCondition(context.Background(), c, pod); err == nil && cond != nil {
		t.Logf("the claim's Attached: %s", cond.Message)
	}
	waitFor(t, "the pod refused twice naming DHCP", 2*time.Minute, func(ctx context.Context) (bool, error) {
		return podEventCount(ctx, c, pod, noLease) >= 2, nil
	})
	t.Logf("the pod refused twice after %s", time.Since(t0).Round(100*time.Millisecond))
	evs, err := claimEvents(context.Background(), c, pod, "AttachFailed")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || evs[0].Type != corev1.EventTypeWarning || evs[0].Count > 1 || !strings.Contains(evs[0].Message, noLease) {
		for _, e := range evs {
			t.Logf("event: %s %s x%d: %s", e.Type, e.Reason, e.Count, e.Message)
		}
		t.Errorf("the claim has %d AttachFailed events (above), want one Warning, once, naming DHCP", len(evs))
	}
	// Each attempt restores the device when its DHCP fails: between
	// attempts it is in the host as it was.
	waitFor(t, "dn0 back in the host as it was between attempts", time.Minute, func(context.Context) (bool, error) {
		l, ok := link(t, nn.hostNS, "dn0")
		return ok && fmt.Sprint(l) == fmt.Sprint(before), nil
	})
	p, err := c.CoreV1().Pods(ns).Get(context.Background(), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The kubelet counts each refused start as a restart, and so may say
	// phase Running of a pod whose container never ran (restartPolicy
	// Always): the pod is not Ready, and the container never ran when
	// each of its ends is a StartError. Its waiting reason carries the
	// refusal, as kubectl get pod shows it.
	for _, cond := range p.Status.Conditions {
		if cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue {
			t.Errorf("the pod whose DHCP got no lease is Ready: %+v", p.Status)
		}
	}
	ran := func(t *corev1.ContainerStateTerminated) bool { return t != nil && t.Reason != "StartError" }
	said := false
	for _, cs := range p.Status.ContainerStatuses {
		if cs.State.Running != nil || ran(cs.State.Terminated) || ran(cs.LastTerminationState.Terminated) {
			t.Errorf("container %s of the pod without a lease started: %+v", cs.Name, cs)
		}
		if w := cs.State.Waiting; w != nil && strings.Contains(w.Message, noLease) {
			said = true
		}
		if e := cs.LastTerminationState.Terminated; e != nil && strings.Contains(e.Message, noLease) {
			said = true
		}
	}
	if !said {
		t.Errorf("no container status of the pod names DHCP (%q): %+v", noLease, p.Status.ContainerStatuses)
	}

	nn.deletePods(t, c, ns, []*corev1.Pod{pod})
	if l, ok := link(t, nn.hostNS, "dn0"); !ok || fmt.Sprint(l) != fmt.Sprint(before) {
		t.Errorf("dn0 after the pod = %+v (in the host: %v), want it as before: %+v", l, ok, before)
	}
	t.Logf("no-DHCP-server test took %s", time.Since(t0).Round(100*time.Millisecond))
}

// podEventWith reports whether a warning event of pod has text in its
// message, and logs it.
func podEventWith(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, text string) bool {
	evs, err := c.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return false
	}
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod.Name && e.Type == corev1.EventTypeWarning &&
			strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// podClaim returns pod's claim (the one its template generated).
func podClaim(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) (*resourceapi.ResourceClaim, error) {
	p, err := c.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if len(p.Status.ResourceClaimStatuses) != 1 || p.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		return nil, fmt.Errorf("pod %s names no claim in its status yet", pod.Name)
	}
	return c.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, *p.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
}

// attachedCondition returns the Attached condition of the device entry of
// pod's claim, or nil when it has none.
func attachedCondition(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod) (*metav1.Condition, error) {
	claim, err := podClaim(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	for _, e := range claim.Status.Devices {
		for i := range e.Conditions {
			if e.Conditions[i].Type == "Attached" {
				return &e.Conditions[i], nil
			}
		}
	}
	return nil, nil
}

// claimEvents returns the events of pod's claim with reason.
func claimEvents(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, reason string) ([]corev1.Event, error) {
	claim, err := podClaim(ctx, c, pod)
	if err != nil {
		return nil, err
	}
	evs, err := c.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []corev1.Event
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "ResourceClaim" && e.InvolvedObject.UID == claim.UID && e.Reason == reason {
			out = append(out, e)
		}
	}
	return out, nil
}

// podEventCount counts the warning events of pod with text in their
// message, each as many times as it happened.
func podEventCount(ctx context.Context, c kubernetes.Interface, pod *corev1.Pod, text string) int {
	evs, err := c.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range evs.Items {
		if e.InvolvedObject.Kind == "Pod" && e.InvolvedObject.Name == pod.Name && e.Type == corev1.EventTypeWarning &&
			strings.Contains(e.Message, text) {
			n += max(1, int(e.Count))
		}
	}
	return n
}

// dhcpAddress is the address of dnsmasq's range among what `testapp net`
// printed: a /24 with a finite valid lifetime.
func dhcpAddress(t *testing.T, out string) netip.Addr {
	t.Helper()
	m := regexp.MustCompile(`(?m)^addr (10\.77\.0\.\d+)/24 valid_lft (\w+) `).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("net1 has no address of 10.77.0.0/24:\n%s", out)
	}
	a := netip.MustParseAddr(m[1])
	if a.Less(netip.MustParseAddr(dhcpFirst)) || netip.MustParseAddr(dhcpLast).Less(a) {
		t.Errorf("net1's address %s is outside dnsmasq's range %s-%s", a, dhcpFirst, dhcpLast)
	}
	lft, err := strconv.Atoi(strings.TrimSuffix(m[2], "sec"))
	if err != nil || lft <= 0 || lft > 120 {
		t.Errorf("net1's address %s has valid_lft %s, want the lease's remaining time (at most 120sec)", a, m[2])
	}
	return a
}

// dhcpNetwork bridges the links peers of the host netns hostNS on
// dhcpBridge, which has the address dhcpServer: the network a DHCP server
// serves, and no server on it.
func dhcpNetwork(t *testing.T, hostNS string, peers ...string) {
	t.Helper()
	nodetest.IP(t, "-n", hostNS, "link", "add", dhcpBridge, "type", "bridge")
	for _, p := range peers {
		nodetest.IP(t, "-n", hostNS, "link", "set", p, "master", dhcpBridge, "up")
	}
	nodetest.IP(t, "-n", hostNS, "addr", "add", dhcpServer+"/24", "dev", dhcpBridge)
	nodetest.IP(t, "-n", hostNS, "link", "set", dhcpBridge, "up")
}

// startDHCPServer makes the dhcpNetwork of peers and runs dnsmasq there,
// bound to the bridge alone, serving leases of 2 minutes (dnsmasq's
// least) of dhcpFirst-dhcpLast with dhcpMTU; it is stopped at the end of
// the test. It returns a reader of dnsmasq's lease file.
func startDHCPServer(t *testing.T, hostNS string, peers ...string) (leases func() string) {
	t.Helper()
	bin := "/usr/sbin/dnsmasq"
	if p, err := exec.LookPath("dnsmasq"); err == nil {
		bin = p
	}
	if _, err := os.Stat(bin); err != nil {
		if testenv.Strict() {
			t.Fatalf("dnsmasq not found (Debian's dnsmasq-base; make unit-deps installs it): %v", err)
		}
		t.Skipf("dnsmasq not found (apt-get install dnsmasq-base): %v", err)
	}
	dhcpNetwork(t, hostNS, peers...)
	dir := t.TempDir()
	cmd := exec.Command("ip", "netns", "exec", hostNS, bin, "--keep-in-foreground", "--conf-file=/dev/null",
		"--port=0", "--interface="+dhcpBridge, "--bind-interfaces", "--except-interface=lo", "--user=root", "--no-ping",
		"--log-dhcp", "--pid-file="+filepath.Join(dir, "pid"), "--log-facility="+filepath.Join(dir, "log"),
		"--dhcp-leasefile="+filepath.Join(dir, "leases"),
		"--dhcp-range="+dhcpFirst+","+dhcpLast+",255.255.255.0,2m",
		"--dhcp-option=option:router,"+dhcpServer, fmt.Sprintf("--dhcp-option=option:mtu,%d", dhcpMTU))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := func(name string) string {
		b, _ := os.ReadFile(filepath.Join(dir, name))
		return string(b)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(unix.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("dnsmasq's log:\n%s", read("log"))
		}
	})
	waitFor(t, "dnsmasq to start", 10*time.Second, func(context.Context) (bool, error) {
		return strings.Contains(read("log"), "DHCP, IP range"), nil
	})
	return func() string { return strings.TrimSpace(read("leases")) }
}

// kernelHasVRF reports whether this kernel makes VRF devices (a VRF added
// in a throwaway netns).
func kernelHasVRF(t *testing.T) bool {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces")
	ns := nodetest.Netns(t, "vrfp")
	out, err := exec.Command("ip", "-n", ns, "link", "add", "probe", "type", "vrf", "table", "1").CombinedOutput()
	if err != nil {
		t.Logf("this kernel makes no VRF devices (ip link add type vrf: %v: %s)", err, strings.TrimSpace(string(out)))
	}
	return err == nil
}
