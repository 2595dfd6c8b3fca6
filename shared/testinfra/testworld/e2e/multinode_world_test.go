package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// The multi-node world: mnNodes real nodes, each with mnDevices host veths
// whose peers are on one bridge (the physical network), one ClusterConfig
// selecting the nodes by mnLabel, with one cluster address pool.
const (
	mnNodes  = 3
	mnLabel  = "netdra.io/e2e-multinode"
	mnPool   = "mnnet"
	mnIPPool = "mnv4"
	mnSubnet = "10.70.0.0/24"
	mnBlock  = 28
	mnBridge = "phys0"
)

// mnDevices is how many devices each node has.
const mnDevices = 2

var clusterConfGR = schema.GroupVersionResource{Group: "netdra.io", Version: "v1alpha1", Resource: "clusterconfigs"}

// mnDevice is the name of node i's device j: the same on every node, as
// eth1 is on a fleet of identical nodes, and one NodeConfig pool of them.
// The scheduler keys an allocated device by driver, ResourceSlice pool and
// device name, so this holds only because dra publishes each node's pool
// under <node>/<pool> (services/dra/slicepool): with the plain pool name,
// a device taken on one node was taken on all, and the third node's pods
// never scheduled. The veth peers, all in the bridge's netns, are named
// apart (mnPeer).
func mnDevice(_, j int) string { return fmt.Sprintf("mn%d", j) }

// mnPeer is the name of the peer of node i's device j, on the bridge.
func mnPeer(i, j int) string { return fmt.Sprintf("p-mn%d%d", i, j) }

// multinode is the world of TestE2E_MultiNode.
type multinode struct {
	cp    *controlplane.ControlPlane
	c     kubernetes.Interface
	dyn   dynamic.Interface
	phys  string // the physical network's netns, with the bridge mnBridge
	run   string // mnLabel's value on this run's nodes
	cc    string // the ClusterConfig's name
	class string // the DeviceClass of pool mnPool
	nodes []*netdraNode
}

// startMultinode starts the physical network, the nodes with their netdra
// processes and the operator, and creates the ClusterConfig. Everything
// goes at the test's end: the ClusterConfig and its NodeConfigs first, then
// the operator, the pods, the netdra processes, the nodes, the bridge.
func startMultinode(t *testing.T) *multinode {
	t.Helper()
	testenv.RequireRoot(t, "runs real nodes, creates network namespaces and moves links between them")
	cp := worldtest.ControlPlane(t)
	installCRDs(t, cp)
	m := &multinode{cp: cp, c: cp.Client(), phys: nodetest.Netns(t, "mnp")}
	var err error
	if m.dyn, err = dynamic.NewForConfig(cp.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	nodetest.IP(t, "-n", m.phys, "link", "add", mnBridge, "type", "bridge")
	nodetest.IP(t, "-n", m.phys, "link", "set", mnBridge, "up")
	m.run = strings.TrimPrefix(m.phys, "mnp")
	m.cc = "multinode-" + m.run
	for i := range mnNodes {
		m.nodes = append(m.nodes, m.startNode(t, i))
	}
	startOperator(t, cp)
	m.class = deviceClass(t, m.c, mnPool)
	m.createClusterConfig(t)
	return m
}

// startNode starts node i: a real node labelled for the ClusterConfig, its
// host netns with mnDevices (their peers on the bridge) and its netdra
// processes.
func (m *multinode) startNode(t *testing.T, i int) *netdraNode {
	t.Helper()
	n := worldtest.Node(t, m.cp, worldtest.WithLabels(map[string]string{mnLabel: m.run}))
	nn := newNetdraNode(t, m.cp, n)
	for j := range mnDevices {
		d, peer := mnDevice(i, j), mnPeer(i, j)
		// MACs unique on the segment: the node's number and the device's.
		nodetest.IP(t, "-n", nn.hostNS, "link", "add", d, "address", fmt.Sprintf("02:00:00:%02x:0e:%02x", i+1, j),
			"mtu", "1500", "type", "veth", "peer", "name", peer, "netns", m.phys)
		nodetest.IP(t, "-n", m.phys, "link", "set", peer, "master", mnBridge, "up")
	}
	nn.startProcs(t, nil)
	return nn
}

// startOperator builds the operator (services/operator, in the product's
// module: its go.sum has the binary's dependencies) and runs it against
// cp until the test ends; its log is printed when the test failed.
func startOperator(t *testing.T, cp *controlplane.ControlPlane) {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/netdra/netdra").Output()
	if err != nil {
		t.Fatalf("finding the netdra module: %v", err)
	}
	dir := nodetest.Dir(t)
	bin := filepath.Join(dir, "operator")
	build := exec.Command("go", "build", "-tags", nodetest.BuildTags, "-o", bin, "./services/operator")
	build.Dir = strings.TrimSpace(string(out))
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./services/operator: %v\n%s", err, out)
	}
	logPath := filepath.Join(dir, "operator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-kubeconfig", cp.Kubeconfig(), "-leader-elect=false",
		"-metrics-addr", "0", "-health-addr", "", "-refresh", "1m")
	cmd.Stderr = logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		logFile.Close()
		if t.Failed() {
			t.Logf("operator log (tail):\n%s", tailFile(logPath, 8000))
		}
	})
}

func tailFile(path string, max int) string {
	b, _ := os.ReadFile(path)
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b)
}

// createClusterConfig creates the ClusterConfig: the nodes labelled
// mnLabel=run get the host manager's mnDevices in pool mnPool and a block
// of the cluster pool mnIPPool. At the test's end it and the NodeConfigs
// generated from it are deleted (the operator still runs then).
func (m *multinode) createClusterConfig(t *testing.T) {
	t.Helper()
	var devs []any
	for j := range mnDevices {
		devs = append(devs, mnDevice(0, j))
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "netdra.io/v1alpha1", "kind": "ClusterConfig",
		"metadata": map[string]any{"name": m.cc},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{mnLabel: m.run}},
			"spec": map[string]any{
				"deviceManagerConfigs": map[string]any{"host": map[string]any{"enabled": true, "ifNames": devs}},
				"pools":                []any{map[string]any{"name": mnPool}},
			},
			"addressPools": []any{map[string]any{"name": mnIPPool, "subnet": mnSubnet, "blockPrefixLength": int64(mnBlock)}},
		},
	}}
	if _, err := m.dyn.Resource(clusterConfGR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the ClusterConfig: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = m.dyn.Resource(clusterConfGR).Delete(ctx, m.cc, metav1.DeleteOptions{})
		sel := metav1.ListOptions{LabelSelector: v1alpha1.LabelClusterConfig + "=" + m.cc}
		_ = m.dyn.Resource(nodeConfigs).DeleteCollection(ctx, metav1.DeleteOptions{}, sel)
		waitFor(t, "the ClusterConfig's NodeConfigs to be gone", time.Minute, func(ctx context.Context) (bool, error) {
			l, err := m.dyn.Resource(nodeConfigs).List(ctx, sel)
			return err == nil && len(l.Items) == 0, nil
		})
	})
}

// clusterConfig reads the ClusterConfig.
func (m *multinode) clusterConfig(ctx context.Context) (*v1alpha1.ClusterConfig, error) {
	u, err := m.dyn.Resource(clusterConfGR).Get(ctx, m.cc, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	cc := &v1alpha1.ClusterConfig{}
	return cc, runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, cc)
}

// generated lists the NodeConfigs the operator generated from the
// ClusterConfig, by node.
func (m *multinode) generated(ctx context.Context) (map[string]*v1alpha1.NodeConfig, error) {
	l, err := m.dyn.Resource(nodeConfigs).List(ctx, metav1.ListOptions{LabelSelector: v1alpha1.LabelClusterConfig + "=" + m.cc})
	if err != nil {
		return nil, err
	}
	out := map[string]*v1alpha1.NodeConfig{}
	for _, u := range l.Items {
		nc := &v1alpha1.NodeConfig{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, nc); err != nil {
			return nil, err
		}
		out[nc.Name] = nc
	}
	return out, nil
}

// relabel takes node out of the ClusterConfig's selector.
func (m *multinode) relabel(t *testing.T, node string) {
	t.Helper()
	waitFor(t, "relabelling "+node, 30*time.Second, func(ctx context.Context) (bool, error) {
		n, err := m.c.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		n.Labels[mnLabel] = "elsewhere"
		_, err = m.c.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err != nil && !apierrors.IsConflict(err) {
			return false, err
		}
		return err == nil, nil
	})
}
