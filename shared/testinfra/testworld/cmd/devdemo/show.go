package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// show prints what happened and how to look further, and checks it: net1
// as the claim asked in the container's own view, and every printed
// grpcurl command answering.
func (d *demo) show(ctx context.Context) error {
	pod, err := d.client.CoreV1().Pods(podNamespace).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	claim, err := d.claim(ctx)
	if err != nil {
		return err
	}
	status, err := claimStatusYAML(claim)
	if err != nil {
		return err
	}
	w := d.out
	fmt.Fprintf(w, "\n== The pod\n")
	fmt.Fprintf(w, "  pod %s/%s is %s on node %s, uid %s\n", podNamespace, podName, pod.Status.Phase, pod.Spec.NodeName, pod.UID)
	fmt.Fprintf(w, "  its claim %s/%s, its network namespace %s (made by containerd)\n", podNamespace, claim.Name, d.podNetns)
	fmt.Fprintf(w, "\n== The container's own view of its network (its log %s)\n%s", d.podLog, indent(d.podView))
	fmt.Fprintf(w, "\n== The claim's status (kubectl get resourceclaim %s -o yaml)\n%s", claim.Name, indent(status))

	if err := checkContainerView(d.podView); err != nil {
		return err
	}
	if d.c.oneshot {
		d.say("checked: the container sees %s up with MAC %s, MTU %d, %s, %s and the route %s via %s",
			wantIfName, wantMAC, wantMTU, wantIPv4, wantIPv6, wantRoute, wantGateway)
	}

	kubeconfig := d.env["KUBECONFIG"]
	fmt.Fprintf(w, "\n== Look further\n")
	fmt.Fprintf(w, "  export KUBECONFIG=%s\n", kubeconfig)
	fmt.Fprintf(w, "  kubectl get pods,resourceclaims -o wide\n")
	fmt.Fprintf(w, "  kubectl get resourceclaim %s -o yaml\n", claim.Name)
	fmt.Fprintf(w, "  kubectl get resourceslices,deviceclasses\n")
	fmt.Fprintf(w, "  kubectl get nodeconfig %s -o yaml\n", d.c.nodeName)
	fmt.Fprintf(w, "  ip -n %s addr; ip -n %s route\n", d.podNetns, d.podNetns)
	fmt.Fprintf(w, "  tail -f %s   (the container prints its view again every 30s)\n", d.podLog)
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
	fmt.Fprintf(w, "  logs: %s (world.log: the real node's kubelet and containerd logs and a ctr command)\n", filepath.Join(d.c.dir, "*.log"))
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

// ipLink is what `ip -j link show dev X` says about a link.
type ipLink struct {
	Address string `json:"address"`
	MTU     int    `json:"mtu"`
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
