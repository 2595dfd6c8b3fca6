package benchworld

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }

const driver = "netdra.io"

var nodeConfigs = schema.GroupVersionResource{Group: "netdra.io", Version: "v1alpha1", Resource: "nodeconfigs"}

var (
	crdOnce sync.Once
	crdErr  error
)

// installCRDs applies the CRDs (pods/chart/netdra/files/crds) once per
// test binary and waits until they are served.
func installCRDs(b testing.TB, cp *controlplane.ControlPlane) {
	b.Helper()
	crdOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, crdErr = crds.Install(ctx, cp.RESTConfig(), "../../../../pods/chart/netdra/files/crds")
	})
	if crdErr != nil {
		b.Fatalf("installing the CRDs: %v", crdErr)
	}
}

// netdraNode is a real node (kubelet, containerd) plus netdra's four processes,
// the provisioner in a throwaway host netns.
type netdraNode struct {
	cp                     *controlplane.ControlPlane
	node                   *realnode.Node
	hostNS, dir            string
	state, prov, dra, nriP *nodetest.Proc
	dyn                    dynamic.Interface
}

// startNetdra starts the node and the processes; provArgs go to the
// provisioner. The processes log at info level (not the debug level of
// the tests), as they would on a node.
func startNetdra(b testing.TB, provArgs ...string) *netdraNode {
	b.Helper()
	return startNetdraOpts(b, netdraOpts{provArgs: provArgs})
}

// netdraOpts are what a benchmark changes in netdra's processes: the
// provisioner's extra flags, where nri and dra serve their metrics (empty:
// nowhere), and dra's netns hook (netdra-hook, as the DaemonSet installs
// it).
type netdraOpts struct {
	provArgs               []string
	nriMetrics, draMetrics string
	netnsHook              bool
}

// startNetdraOpts is startNetdra with opts.
func startNetdraOpts(b testing.TB, opts netdraOpts) *netdraNode {
	b.Helper()
	testenv.RequireRoot(b, "creates network namespaces and moves links between them")
	cp := worldtest.ControlPlane(b)
	installCRDs(b, cp)
	n := worldtest.Node(b, cp)
	nn := &netdraNode{cp: cp, node: n, hostNS: nodetest.Netns(b, "bwh"), dir: nodetest.Dir(b)}
	quiet := []string{"-log-level", "info"}
	if os.Getenv("NETDRA_BENCH_LOGS") != "" {
		quiet = []string{"-log-level", "debug"}
	}
	nn.state = nodetest.Start(b, "state", nn.dir, "", append(quiet, "-db", nn.dir+"/state.db")...)
	nn.prov = nodetest.Start(b, "provisioner", nn.dir, nn.hostNS, append(quiet, opts.provArgs...)...)
	socks := slices.Clip(append(quiet, "-state-socket", nn.state.Socket, "-provisioner-socket", nn.prov.Socket))
	gate := filepath.Join(nn.dir, "nri-gate.sock")
	nn.nriP = nodetest.Start(b, "nri", nn.dir, "", append(socks, "-nri-socket", n.NRISocket(), "-metrics-address", opts.nriMetrics,
		"-gate-hook", nodetest.Hook(b), "-gate-socket", gate)...)
	draArgs := append(socks, "-node-name", n.Name(), "-kubeconfig", cp.Kubeconfig(), "-metrics-address", opts.draMetrics,
		"-plugin-dir", nn.dir+"/plugins", "-registrar-dir", n.RegistryDir(), "-cdi-dir", n.CDIDir())
	if opts.netnsHook {
		draArgs = append(draArgs, "-netns-hook", nodetest.Hook(b), "-gate-socket", gate)
	}
	nn.dra = nodetest.Start(b, "dra", nn.dir, "", draArgs...)
	if os.Getenv("NETDRA_BENCH_LOGS") != "" {
		// Before the processes are stopped (cleanups run last first).
		b.Cleanup(func() {
			for _, p := range []*nodetest.Proc{nn.state, nn.prov, nn.nriP, nn.dra} {
				b.Logf("%s log:\n%s", p.Name, p.Log())
			}
		})
	}
	var err error
	if nn.dyn, err = dynamic.NewForConfig(cp.RESTConfig()); err != nil {
		b.Fatal(err)
	}
	return nn
}

// applyNodeConfig creates the node's NodeConfig, deleted at the end.
func (nn *netdraNode) applyNodeConfig(b testing.TB, spec map[string]any) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := nn.dyn.Resource(nodeConfigs)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "netdra.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": nn.node.Name()}, "spec": spec}}
	if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		b.Fatalf("applying the NodeConfig: %v", err)
	}
	b.Cleanup(func() { _ = res.Delete(context.Background(), nn.node.Name(), metav1.DeleteOptions{}) })
}

// updateNodeConfig replaces the spec of the node's NodeConfig.
func (nn *netdraNode) updateNodeConfig(b testing.TB, spec map[string]any) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := nn.dyn.Resource(nodeConfigs)
	// dra writes the status a moment after each change: a conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := res.Get(ctx, nn.node.Name(), metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Object["spec"] = spec
		_, err = res.Update(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		b.Fatalf("updating the NodeConfig: %v", err)
	}
}

// recordRSS writes the VmRSS and VmHWM of the four processes.
func (nn *netdraNode) recordRSS(b testing.TB, phase, context string) {
	b.Helper()
	for _, p := range []*nodetest.Proc{nn.state, nn.prov, nn.dra, nn.nriP} {
		pid, err := figures.FindPID("-socket", p.Socket)
		if err != nil {
			b.Fatal(err)
		}
		rss, hwm, err := figures.ProcStatus(pid)
		if err != nil {
			b.Fatal(err)
		}
		if err := figures.Record(figures.RSSFile, figures.RSS{Process: p.Name, Phase: phase, RSSKiB: rss, HWMKiB: hwm, Context: context}); err != nil {
			b.Fatal(err)
		}
	}
}
