package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/services/cli/report"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// TestE2E_CLI runs kubectl netdra as the person on call would, against
// netdra installed from pods/base on the real node (the images of make
// images-load, the DaemonSet's pod to exec into): built with make cli and
// put on the PATH, `kubectl netdra node` shows the demo pod's device
// attached, held by its claim, and every process healthy with its version
// and image (read through exec of their inspect subcommand); `nodes` shows
// the node's NodeConfig applied; `claims` shows a pod asking for more
// devices than the node has as failed, with the scheduler's reason, and
// the demo claim ok. --socket-dir reads the same node through the sockets
// on the host.
func TestE2E_CLI(t *testing.T) {
	testenv.RequireRoot(t, "runs a real node and hands host veths to pods")
	cp := worldtest.ControlPlane(t)
	n := worldtest.Node(t, cp)
	in := newInstaller(t, cp, n)
	links := hostVeths(t, "ndcl", 2)

	const tag = "e2e-cli"
	in.loadImages(t, tag)
	overlay := in.writeOverlay(t, tag)
	t.Cleanup(func() { in.forceUninstall(t, overlay) })
	in.k(t, "apply", "--server-side", "-k", overlay)
	in.k(t, "-n", "netdra-system", "rollout", "status", "ds/netdra-node", "--timeout=3m")
	in.k(t, "-n", "netdra-system", "rollout", "status", "deploy/netdra-operator", "--timeout=3m")
	nodePod := in.nodePod(t)
	in.configure(t, links)
	pod := in.demoPod(t)

	bin := filepath.Join(in.dir, "bin")
	in.run(t, 10*time.Minute, "make", "-C", in.repo, "cli", "OUT="+bin)
	netdra := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, in.kubectl, append([]string{"netdra"}, args...)...)
		cmd.Env = append(os.Environ(), "KUBECONFIG="+in.cp.Kubeconfig(), "PATH="+bin+":"+os.Getenv("PATH"))
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubectl netdra %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errOut.String())
		}
		return out.String()
	}

	// The node, through exec in the node pod.
	var node report.Node
	decode(t, netdra("node", n.Name(), "-o", "json"), &node)
	if node.Pod != "netdra-system/"+nodePod.Name || node.Driver != driver {
		t.Errorf("node view of pod %q driver %q, want netdra-system/%s %s", node.Pod, node.Driver, nodePod.Name, driver)
	}
	checkProcesses(t, node, true, ":"+tag)
	claim := checkDemoDevice(t, node, links, string(pod.UID))
	table := netdra("node", n.Name())
	t.Logf("kubectl netdra node %s:\n%s", n.Name(), table)
	requireLines(t, "kubectl netdra node", table, "attached", "netdra-demo/netdra-demo ", claim)

	// The same node through the sockets, as root on the node.
	s := filepath.Join(in.dir, "s")
	in.run(t, time.Minute, "ln", "-sfn", filepath.Join(n.KubeletDir(), "pods", string(nodePod.UID), "volumes/kubernetes.io~empty-dir/sockets"), s)
	decode(t, netdra("node", n.Name(), "--socket-dir", s, "-o", "json"), &node)
	checkProcesses(t, node, false, "")
	checkDemoDevice(t, node, links, string(pod.UID))

	// Cluster-wide: the node's NodeConfig.
	var nodes []report.NodePools
	decode(t, netdra("nodes", "-o", "json"), &nodes)
	found := false
	for _, np := range nodes {
		if np.Node == n.Name() {
			found = true
			if np.Applied != "True" || np.Driver != driver {
				t.Errorf("nodes: %+v, want Applied True, driver %s", np, driver)
			}
		}
	}
	if !found {
		t.Errorf("nodes: %s missing from %+v", n.Name(), nodes)
	}

	// A pod asking for three host-net devices of a node that has two:
	// its claim is failed, the scheduler says why.
	greedy := filepath.Join(in.dir, "netdra-greedy.yaml")
	write(t, greedy, `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: greedy
  namespace: netdra-demo
spec:
  devices:
    requests:
      - name: net
        exactly:
          deviceClassName: host-net.netdra.io
          allocationMode: ExactCount
          count: 3
---
apiVersion: v1
kind: Pod
metadata:
  name: greedy
  namespace: netdra-demo
spec:
  resourceClaims:
    - name: net
      resourceClaimName: greedy
  terminationGracePeriodSeconds: 1
  containers:
    - name: app
      image: localhost/netdra-realnode/testapp:1
      imagePullPolicy: Never
      resources:
        claims:
          - name: net
`)
	in.k(t, "apply", "-f", greedy)
	var claims []report.Claim
	waitFor(t, "kubectl netdra claims: the greedy claim failed with the scheduler's reason", 2*time.Minute, func(context.Context) (bool, error) {
		decode(t, netdra("claims", "-o", "json"), &claims)
		for _, c := range claims {
			if c.Name == "greedy" && c.State == report.ClaimFailed && len(c.Reasons) > 0 && c.Reasons[0].Reason == "FailedScheduling" {
				return true, nil
			}
		}
		return false, nil
	})
	t.Logf("kubectl netdra claims:\n%s", netdra("claims"))
	decode(t, netdra("claims", "--all", "-o", "json"), &claims)
	ok := false
	for _, c := range claims {
		ok = ok || (c.Namespace == "netdra-demo" && c.Name == claim && c.State == report.ClaimOK && c.Node == n.Name())
	}
	if !ok {
		t.Errorf("claims --all: the demo claim %s is not ok on %s: %+v", claim, n.Name(), claims)
	}
	in.k(t, "delete", "-f", greedy, "--timeout=1m")
	in.demoManifest(t, "netdra-demo-2", "10.100.0.11/24") // uninstall deletes it too: never applied here

	in.uninstall(t, overlay, links)
}

func decode(t *testing.T, out string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("kubectl netdra -o json: %v:\n%s", err, out)
	}
}

// checkProcesses: the four processes healthy; read through the pod, with
// their binaries' versions, their containers' images (of tag) ready.
func checkProcesses(t *testing.T, node report.Node, pod bool, imageSuffix string) {
	t.Helper()
	if len(node.Processes) != 4 {
		t.Fatalf("processes %+v", node.Processes)
	}
	for _, p := range node.Processes {
		if !p.Healthy {
			t.Errorf("process %s not healthy: %+v", p.Name, p)
		}
		if pod && (p.Version == "" || !strings.HasSuffix(p.Image, imageSuffix) || p.Ready == nil || !*p.Ready) {
			t.Errorf("process %s through the pod: version %q image %q ready %v", p.Name, p.Version, p.Image, p.Ready)
		}
	}
	for _, name := range []string{"state", "dra", "nri"} {
		for _, p := range node.Processes {
			if p.Name == name && p.Detail == "" {
				t.Errorf("process %s: no status detail: %+v", name, p)
			}
		}
	}
	if len(node.Problems) > 0 {
		t.Errorf("problems: %q", node.Problems)
	}
}

// checkDemoDevice: one of the links is attached to the demo pod, held by
// its claim; the other is free and published. It returns the claim's name.
func checkDemoDevice(t *testing.T, node report.Node, links []hostVeth, podUID string) string {
	t.Helper()
	var attached, free int
	var claim string
	for _, d := range node.Devices {
		if d.Name != links[0].name && d.Name != links[1].name {
			continue
		}
		switch {
		case d.State == report.StateAttached && len(d.Holders) == 1:
			h := d.Holders[0]
			if h.ClaimNamespace != "netdra-demo" || h.Pod != "netdra-demo/netdra-demo" || h.PodUID != podUID || !h.Attached || !d.Published {
				t.Errorf("device %s: %+v", d.Name, d)
			}
			claim = h.ClaimName
			attached++
		case d.State == report.StateFree && d.Published:
			free++
		default:
			t.Errorf("device %s: %+v", d.Name, d)
		}
	}
	if attached != 1 || free != 1 {
		t.Errorf("the host veths: %d attached, %d free, want 1 and 1: %+v", attached, free, node.Devices)
	}
	return claim
}
