package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// show prints what happened and how to look further, and checks it: net1
// as the claim asked, and every printed grpcurl command answering.
func (d *demo) show(ctx context.Context) error {
	pod, err := d.client.CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	claim, err := d.claim(ctx)
	if err != nil {
		return err
	}
	addr, err := exec.Command("ip", "-n", d.podNetns, "addr").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s addr: %w: %s", d.podNetns, err, addr)
	}
	route, err := exec.Command("ip", "-n", d.podNetns, "route").CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s route: %w: %s", d.podNetns, err, route)
	}
	status, err := claimStatusYAML(claim)
	if err != nil {
		return err
	}
	w := d.out
	fmt.Fprintf(w, "\n== The pod\n")
	fmt.Fprintf(w, "  pod %s/%s is %s on node %s, uid %s\n", podNamespace, podName, pod.Status.Phase, pod.Spec.NodeName, pod.UID)
	fmt.Fprintf(w, "  its claim %s/%s, its network namespace %s\n", podNamespace, claim.Name, d.podNetns)
	fmt.Fprintf(w, "\n== ip -n %s addr\n%s", d.podNetns, indent(string(addr)))
	fmt.Fprintf(w, "\n== ip -n %s route\n%s", d.podNetns, indent(string(route)))
	fmt.Fprintf(w, "\n== The claim's status (kubectl get resourceclaim %s -o yaml)\n%s", claim.Name, indent(status))

	if err := d.checkNet1(); err != nil {
		return err
	}

	kubeconfig := d.env["KUBECONFIG"]
	fmt.Fprintf(w, "\n== Look further\n")
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(w, "  kubectl get pods,resourceclaims -o wide\n")
	fmt.Fprintf(w, "  kubectl get resourceclaim %s -o yaml\n", claim.Name)
	fmt.Fprintf(w, "  kubectl get resourceslices,deviceclasses\n")
	fmt.Fprintf(w, "  kubectl get nodeconfig %s -o yaml\n", d.c.nodeName)
	fmt.Fprintf(w, "  ip -n %s addr\n", d.podNetns)
	for _, g := range d.grpcurlCommands(string(claim.UID), string(pod.UID)) {
		fmt.Fprintf(w, "  %s\n", g.String())
		if err := g.check(); err != nil {
			return err
		}
	}
	if d.c.draMetrics != "" {
		lines, err := d.deviceCounters(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "\n== The device's counters (curl -s http://%s/metrics | grep netdra_device_)\n%s", d.c.draMetrics, indent(strings.Join(lines, "\n")))
	}
	fmt.Fprintf(w, "  logs: %s\n", filepath.Join(d.c.dir, "*.log"))
	return nil
}

// deviceCounters returns dra's netdra_device_* metric lines of the demo
// pod (the eBPF counters the provisioner keeps on its device); an error
// when there are none.
func (d *demo) deviceCounters(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.c.draMetrics+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("dra's metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("dra's metrics: %w", err)
	}
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "netdra_device_") && strings.Contains(l, `pod="`+podName+`"`) {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("dra's metrics at http://%s/metrics have no netdra_device_ counters of pod %s", d.c.draMetrics, podName)
	}
	return lines, nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return "  " + strings.Join(lines, "\n  ") + "\n"
}

// ipLink is what `ip -j addr show dev X` says about a link.
type ipLink struct {
	Address   string `json:"address"`
	MTU       int    `json:"mtu"`
	AddrInfos []struct {
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
	} `json:"addr_info"`
}

// checkNet1 checks net1 in the pod's netns: the claim's MAC, MTU,
// addresses and route.
func (d *demo) checkNet1() error {
	out, err := exec.Command("ip", "-n", d.podNetns, "-j", "addr", "show", "dev", wantIfName).Output()
	if err != nil {
		return fmt.Errorf("%s is not in the pod's network namespace %s: %w", wantIfName, d.podNetns, err)
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return fmt.Errorf("ip -j addr show dev %s: %v: %s", wantIfName, err, out)
	}
	l := links[0]
	addrs := map[string]bool{}
	for _, a := range l.AddrInfos {
		addrs[fmt.Sprintf("%s/%d", a.Local, a.PrefixLen)] = true
	}
	if l.Address != wantMAC || l.MTU != wantMTU || !addrs[wantIPv4] || !addrs[wantIPv6] {
		return fmt.Errorf("%s in the pod is %s mtu %d with %v, want %s mtu %d with %s and %s",
			wantIfName, l.Address, l.MTU, addrs, wantMAC, wantMTU, wantIPv4, wantIPv6)
	}
	route, err := exec.Command("ip", "-n", d.podNetns, "route", "show", wantRoute).Output()
	if err != nil || !strings.Contains(string(route), "via "+wantGateway+" dev "+wantIfName) {
		return fmt.Errorf("the pod has no route %s via %s dev %s: %v %q", wantRoute, wantGateway, wantIfName, err, route)
	}
	return nil
}

// grpcurlCmd is one printed grpcurl command and what its output must
// contain.
type grpcurlCmd struct {
	bin    string
	args   []string
	want   string
	stream bool // stopped by -max-time: its exit status is not success
}

func (g grpcurlCmd) String() string {
	return g.bin + " " + strings.Join(g.args, " ")
}

// check runs the command: it must answer, and say want.
func (g grpcurlCmd) check() error {
	out, err := exec.Command(g.bin, g.args...).CombinedOutput()
	if (err != nil && !g.stream) || !strings.Contains(string(out), g.want) {
		return fmt.Errorf("%s: %v; want %q in its output:\n%s", g.String(), err, g.want, out)
	}
	return nil
}

// grpcurlCommands is one command per node process socket.
func (d *demo) grpcurlCommands(claimUID, podUID string) []grpcurlCmd {
	cmd := func(name, method, want string, stream bool) grpcurlCmd {
		args := []string{"-plaintext", "-unix"}
		if stream {
			args = append(args, "-max-time", "2")
		}
		return grpcurlCmd{bin: d.c.grpcurl, args: append(args, d.socket(name), method), want: want, stream: stream}
	}
	return []grpcurlCmd{
		cmd("state", "netdra.state.v1.StateService/Dump", claimUID, false),
		cmd("provisioner", "netdra.provisioner.v1.ProvisionerService/WatchDevices", "DEVICE_MANAGER_HOST", true),
		cmd("dra", "netdra.dra.v1.DraService/Status", `"registered": true`, false),
		cmd("nri", "netdra.nri.v1.NriService/Status", podUID, false),
	}
}
