package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/crds"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

func TestMain(m *testing.M) { worldtest.Main(m) }

var (
	crdOnce sync.Once
	crdErr  error
)

// installCRDs applies the CRDs (pods/chart/netdra/files/crds) once per
// test binary and waits until they are served.
func installCRDs(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	crdOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, crdErr = crds.Install(ctx, cp.RESTConfig(), "../../../../pods/chart/netdra/files/crds")
	})
	if crdErr != nil {
		t.Fatalf("installing the CRDs: %v", crdErr)
	}
}

// netdraNode is one node running netdra: a real node (kubelet, containerd
// with NRI, runc) plus the four netdra processes, the provisioner in a
// throwaway host netns that stands in for the node's.
type netdraNode struct {
	cp                     *controlplane.ControlPlane
	node                   *realnode.Node
	hostNS                 string
	dir                    string
	state, prov, dra, nriP *nodetest.Proc
	sockets                string // the handover socket of dra's socket holder
	keepSockets            bool   // dra's kubelet sockets held by `dra sockets`
	stateClient            statev1.StateServiceClient
	dyn                    dynamic.Interface
	// metrics are the processes' metrics addresses by process name,
	// when they serve metrics (netdraOpts.metrics); the provisioner's is
	// in hostNS.
	metrics map[string]string
}

func startNetdra(t *testing.T, devices ...string) *netdraNode {
	t.Helper()
	return startNetdraWith(t, nil, devices...)
}

// startNetdraKeepingSockets is startNetdra with dra's kubelet sockets held
// by `dra sockets` across dra's restarts (dra -keep-sockets).
func startNetdraKeepingSockets(t *testing.T, devices ...string) *netdraNode {
	t.Helper()
	return startNetdraOpts(t, true, nil, nil, devices...)
}

// startNetdraWith is startNetdra with more flags for the provisioner.
func startNetdraWith(t *testing.T, provArgs []string, devices ...string) *netdraNode {
	t.Helper()
	return startNetdraOpts(t, false, provArgs, nil, devices...)
}

func startNetdraOpts(t *testing.T, keepSockets bool, provArgs []string, nodeOpts []worldtest.NodeOption, devices ...string) *netdraNode {
	t.Helper()
	return startNetdraNode(t, netdraOpts{keepSockets: keepSockets, provArgs: provArgs, nodeOpts: nodeOpts}, devices...)
}

// netdraOpts are how a test's netdra differs from the plain one.
type netdraOpts struct {
	keepSockets bool     // dra's kubelet sockets held by `dra sockets`
	provArgs    []string // more flags for the provisioner
	// metrics serves each process's Prometheus metrics on a free
	// loopback port (the provisioner's in its host netns, whose lo is
	// brought up for it): netdraNode.metrics has the addresses.
	metrics bool
	// nodeOpts configure the real node (its runtime, for one).
	nodeOpts []worldtest.NodeOption
}

func startNetdraNode(t *testing.T, o netdraOpts, devices ...string) *netdraNode {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	cp := worldtest.ControlPlane(t)
	installCRDs(t, cp)
	nn := newNetdraNode(t, cp, worldtest.Node(t, cp, o.nodeOpts...))
	nn.keepSockets = o.keepSockets
	for i, d := range devices {
		nodetest.IP(t, "-n", nn.hostNS, "link", "add", d, "address", fmt.Sprintf("02:00:00:00:0e:%02x", i),
			"mtu", "1500", "type", "veth", "peer", "name", "p-"+d)
	}
	if o.metrics {
		nodetest.IP(t, "-n", nn.hostNS, "link", "set", "lo", "up")
		nn.metrics = map[string]string{"state": testenv.FreeAddr(t), "provisioner": "127.0.0.1:9654",
			"dra": testenv.FreeAddr(t), "nri": testenv.FreeAddr(t)}
	}
	nn.startProcs(t, o.provArgs)
	return nn
}

// newNetdraNode is a netdraNode of n with its throwaway host netns and
// its sockets' folder; startProcs starts its processes.
func newNetdraNode(t *testing.T, cp *controlplane.ControlPlane, n *realnode.Node) *netdraNode {
	t.Helper()
	return &netdraNode{cp: cp, node: n, hostNS: nodetest.Netns(t, "e2h"), dir: nodetest.Dir(t)}
}

// startProcs starts the node's four netdra processes, the provisioner in
// its host netns with provArgs, and connects to the state service.
func (nn *netdraNode) startProcs(t *testing.T, provArgs []string) {
	t.Helper()
	cp, n := nn.cp, nn.node
	metrics := func(name string) []string {
		if nn.metrics == nil {
			return nil
		}
		return []string{"-metrics-address", nn.metrics[name]}
	}
	nn.state = nodetest.Start(t, "state", nn.dir, "", append([]string{"-db", nn.dir + "/state.db"}, metrics("state")...)...)
	// The netns pins as in the DaemonSet: they outlive a provisioner
	// restart (nodetest keeps its mount namespace across restarts).
	provArgs = append(append([]string{"-netns-pin-dir", filepath.Join(nn.dir, "pins")}, metrics("provisioner")...), provArgs...)
	nn.prov = nodetest.Start(t, "provisioner", nn.dir, nn.hostNS, provArgs...)
	socks := []string{"-state-socket", nn.state.Socket, "-provisioner-socket", nn.prov.Socket, "-metrics-address", ""}
	// The gate as in the DaemonSet: runc runs dra's CDI hook, `netdra-hook
	// check-netns -socket <gate>` (the hook binary from the host), at each
	// creation of a container of a claim; it waits on nri's gate socket
	// for the pod's attach, outside containerd's NRI lock, then checks the
	// container's netns. nri's own `wait-attached` hook is for containers
	// without it.
	gate := filepath.Join(nn.dir, "nri-gate.sock")
	nriArgs := append(slices.Clone(socks), "-nri-socket", n.NRISocket(), "-gate-hook", nodetest.Hook(t), "-gate-socket", gate)
	nn.nriP = nodetest.Start(t, "nri", nn.dir, "", append(nriArgs, metrics("nri")...)...)
	draArgs := append(socks, "-node-name", n.Name(), "-kubeconfig", cp.Kubeconfig(),
		"-plugin-dir", nn.dir+"/plugins", "-registrar-dir", n.RegistryDir(), "-cdi-dir", n.CDIDir(), "-publish-debounce", "50ms",
		"-netns-hook", nodetest.Hook(t), "-gate-socket", gate)
	if nn.keepSockets {
		// dra's kubelet sockets held across its restarts by `dra sockets`.
		nn.sockets = startSocketHolder(t, nn.dir)
		draArgs = append(draArgs, "-keep-sockets", nn.sockets)
	}
	nn.dra = nodetest.Start(t, "dra", nn.dir, "", append(draArgs, metrics("dra")...)...)
	// Registered last, run first: the pods go through the real teardown
	// (StopPodSandbox to nri, NodeUnprepareResources to dra) while netdra
	// still runs, and every device comes back before the processes stop.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		n.Drain(ctx)
	})
	conn, err := rpc.Dial(nn.state.Socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	nn.stateClient = statev1.NewStateServiceClient(conn)
	if nn.dyn, err = dynamic.NewForConfig(cp.RESTConfig()); err != nil {
		t.Fatal(err)
	}
}

// startSocketHolder runs `dra sockets`, the holder of dra's kubelet
// sockets, with its handover socket in dir (returned), until the end of
// the test: then it gets SIGTERM (it removes the sockets it holds) after
// dra is gone. Its log is printed when the test failed.
func startSocketHolder(t *testing.T, dir string) string {
	t.Helper()
	sock := filepath.Join(dir, "dra-sockets.sock")
	logFile, err := os.Create(filepath.Join(dir, "dra-sockets.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(nodetest.Binaries(t), "dra"), "sockets", "-socket", sock, "-log-level", "debug")
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); logFile.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Error("the socket holder did not stop within 10 s of SIGTERM")
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			out, _ := os.ReadFile(logFile.Name())
			t.Logf("dra sockets log:\n%s", out)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if fi, err := os.Stat(sock); err == nil && fi.Mode().Type() == os.ModeSocket {
			return sock
		}
		select {
		case <-exited:
			out, _ := os.ReadFile(logFile.Name())
			t.Fatalf("dra sockets exited before listening:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dra sockets not listening on %s", sock)
		}
	}
}

// applyNodeConfig creates or replaces the node's NodeConfig.
func (nn *netdraNode) applyNodeConfig(t *testing.T, spec map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := nn.dyn.Resource(nodeConfigs)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "netdra.io/v1alpha1", "kind": "NodeConfig",
		"metadata": map[string]any{"name": nn.node.Name()}, "spec": spec}}
	// dra writes the NodeConfig's status a moment after each change,
	// which a replace made between its read and its write conflicts with.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := res.Get(ctx, nn.node.Name(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = res.Create(ctx, u, metav1.CreateOptions{})
			return err
		}
		if err != nil {
			return err
		}
		u.SetResourceVersion(cur.GetResourceVersion())
		_, err = res.Update(ctx, u, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatalf("applying the NodeConfig: %v", err)
	}
	t.Cleanup(func() { _ = res.Delete(context.Background(), nn.node.Name(), metav1.DeleteOptions{}) })
}
