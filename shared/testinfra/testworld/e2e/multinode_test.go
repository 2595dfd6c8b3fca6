package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// churnRounds is how often the churn fills every device of every node at
// once and empties them again.
const churnRounds = 3

// TestE2E_MultiNode: three real nodes against one control plane, each with
// its own kubelet, containerd and netdra processes (the provisioner in its
// own host netns), their devices' peers on one bridge that stands for the
// physical network, and the operator. One ClusterConfig selects the nodes
// by a label and carves a cluster address pool into per-node blocks:
//   - the operator configures the three nodes, with disjoint blocks;
//   - pods on two nodes take addresses of the pool and ping each other
//     from inside their containers over their claims' VLAN (tagged and
//     checked in software by netdra's eBPF programs), while a pod of
//     another VLAN on the third node reaches neither;
//   - churn: pods created and deleted on every node at once, no address
//     ever held twice, nothing left after;
//   - a node relabelled out of the selector and one removed (Node deleted,
//     node stopped): their NodeConfigs go; the relabelled node's block is
//     retained (its Node exists, its pods could hold addresses of it), the
//     removed node's is released; the remaining node keeps its own.
//
// All along, a guard checks that no two nodes' blocks or pools overlap and
// that no address is in two claims at once.
//
// The nodes share the host's network namespace for their control traffic
// (kubelet, containerd, the apiserver's connections to the kubelets, as
// realnode runs them); each node's data plane is its provisioner's host
// netns, and the bridge joins those.
func TestE2E_MultiNode(t *testing.T) {
	m := startMultinode(t)
	guard := m.startGuard(t)
	var blocks map[string]netip.Prefix
	t.Run("operator configures three nodes", func(t *testing.T) {
		blocks = m.waitBlocks(t, m.nodes)
		t.Logf("blocks: %v", blocks)
		for _, nn := range m.nodes {
			waitFor(t, "pool "+mnPool+" on "+nn.node.Name(), 2*time.Minute, func(ctx context.Context) (bool, error) {
				p, err := slicePools(ctx, m.c, nn.node.Name())
				return err == nil && p[mnPool] == mnDevices, nil
			})
			nn.waitStatus(t, "dra's count of pool "+mnIPPool, func(nc *v1alpha1.NodeConfig) bool {
				return ipPoolUsed(nc) == 0
			})
		}
	})
	if blocks == nil {
		t.FailNow()
	}
	t.Run("pods on two nodes ping over their VLAN", func(t *testing.T) { m.pingAcross(t, guard, blocks) })
	t.Run("churn on every node at once", func(t *testing.T) { m.churn(t, guard, blocks) })
	t.Run("a node relabelled and one removed", func(t *testing.T) { m.relabelAndRemove(t, blocks) })
}

// ipPoolUsed is dra's count of pool mnIPPool's addresses in use; -1 when it
// reports none.
func ipPoolUsed(nc *v1alpha1.NodeConfig) int32 {
	for _, p := range nc.Status.IPPools {
		if p.Name == mnIPPool {
			return p.Used
		}
	}
	return -1
}

// waitBlocks waits until exactly nodes hold a block of the cluster pool,
// one each, and each has the NodeConfig generated from the ClusterConfig
// whose pool mnIPPool hands out only addresses of its block; it returns
// the blocks by node.
func (m *multinode) waitBlocks(t *testing.T, nodes []*netdraNode, retained ...*netdraNode) map[string]netip.Prefix {
	t.Helper()
	var blocks map[string]netip.Prefix
	var last error
	waitFor(t, fmt.Sprintf("blocks of %s for %d nodes, %d retained", mnIPPool, len(nodes), len(retained)), 2*time.Minute, func(ctx context.Context) (bool, error) {
		blocks, last = m.blocksNow(ctx, nodes, retained)
		return last == nil, nil
	})
	if last != nil {
		t.Fatal(last)
	}
	return blocks
}

func (m *multinode) blocksNow(ctx context.Context, nodes, retained []*netdraNode) (map[string]netip.Prefix, error) {
	cc, err := m.clusterConfig(ctx)
	if err != nil {
		return nil, err
	}
	ncs, err := m.generated(ctx)
	if err != nil {
		return nil, err
	}
	blocks := map[string]netip.Prefix{}
	for _, p := range cc.Status.AddressPools {
		for _, b := range p.Blocks {
			if _, dup := blocks[b.Node]; dup || p.Name != mnIPPool {
				return nil, fmt.Errorf("blocks %+v", cc.Status.AddressPools)
			}
			blocks[b.Node] = netip.MustParsePrefix(b.CIDR)
			if b.Retained != slices.ContainsFunc(retained, func(nn *netdraNode) bool { return nn.node.Name() == b.Node }) {
				return nil, fmt.Errorf("block %s of %s: retained %v, want it retained only for %d nodes", b.CIDR, b.Node, b.Retained, len(retained))
			}
		}
	}
	if len(blocks) != len(nodes)+len(retained) || len(ncs) != len(nodes) {
		return nil, fmt.Errorf("%d blocks, %d NodeConfigs, want %d blocks (%d retained) and %d NodeConfigs", len(blocks), len(ncs), len(nodes)+len(retained), len(retained), len(nodes))
	}
	for _, nn := range nodes {
		b, ok := blocks[nn.node.Name()]
		nc := ncs[nn.node.Name()]
		if !ok || nc == nil || nc.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByOperator {
			return nil, fmt.Errorf("node %s: block %v, NodeConfig %v", nn.node.Name(), b, nc != nil)
		}
		addrs := usableAddrs(nc)
		if len(addrs) == 0 {
			return nil, fmt.Errorf("node %s: its NodeConfig has no pool %s", nn.node.Name(), mnIPPool)
		}
		for _, a := range addrs {
			if !b.Contains(a) {
				return nil, fmt.Errorf("node %s: address %s of its pool is outside its block %s", nn.node.Name(), a, b)
			}
		}
	}
	return blocks, nil
}

// mnPod is a pod of the test on one of its nodes.
type mnPod struct {
	pod *corev1.Pod
	nn  *netdraNode
}

// startPods creates a pod from tmpl on each of on, all at once, and waits
// until they run.
func startPods(t *testing.T, ns, tmpl, prefix string, on []*netdraNode) []mnPod {
	t.Helper()
	c := on[0].cp.Client()
	var pods []mnPod
	for i, nn := range on {
		pods = append(pods, mnPod{pod: newPod(t, c, ns, fmt.Sprintf("%s-%d", prefix, i), nn.node.Name(), tmpl), nn: nn})
	}
	for _, p := range pods {
		waitFor(t, "pod "+p.pod.Name+" to run", 2*time.Minute, func(ctx context.Context) (bool, error) {
			got, err := c.CoreV1().Pods(ns).Get(ctx, p.pod.Name, metav1.GetOptions{})
			return err == nil && got.Status.Phase == corev1.PodRunning, nil
		})
	}
	return pods
}

// addr is the pod's address of pool mnIPPool, from its claim's status,
// checked on net1 inside its netns.
func (p mnPod) addr(t *testing.T) netip.Addr {
	t.Helper()
	c := p.nn.cp.Client()
	got, err := c.CoreV1().Pods(p.pod.Namespace).Get(context.Background(), p.pod.Name, metav1.GetOptions{})
	if err != nil || len(got.Status.ResourceClaimStatuses) != 1 || got.Status.ResourceClaimStatuses[0].ResourceClaimName == nil {
		t.Fatalf("pod %s: no claim in its status: %v", p.pod.Name, err)
	}
	claim, err := c.ResourceV1().ResourceClaims(p.pod.Namespace).Get(context.Background(), *got.Status.ResourceClaimStatuses[0].ResourceClaimName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d := claim.Status.Devices
	if len(d) != 1 || d[0].NetworkData == nil || len(d[0].NetworkData.IPs) != 1 {
		t.Fatalf("claim of %s: status devices %+v, want one address", p.pod.Name, d)
	}
	cidr := d[0].NetworkData.IPs[0]
	sb, ok := p.nn.node.Sandbox(p.pod.UID)
	if !ok {
		t.Fatalf("no sandbox for %s", p.pod.Name)
	}
	if in, ok := link(t, sb, "net1"); !ok || !in.has(cidr) {
		t.Fatalf("net1 of %s: %+v (present %v), want %s", p.pod.Name, in, ok, cidr)
	}
	return netip.MustParsePrefix(cidr).Addr()
}

// ping pings dst once from inside the pod's container.
func (p mnPod) ping(ctx context.Context, dst netip.Addr) (string, bool) {
	out, code, err := p.nn.node.Exec(ctx, p.pod.UID, "app", "/testapp", "ping", dst.String())
	return strings.TrimSpace(out), err == nil && code == 0
}

// deletePods deletes the pods and waits until they, their claims and the
// nodes' allocations are gone.
func deletePods(t *testing.T, ns string, pods []mnPod) {
	t.Helper()
	if len(pods) == 0 {
		return
	}
	c := pods[0].nn.cp.Client()
	for _, p := range pods {
		if err := c.CoreV1().Pods(ns).Delete(context.Background(), p.pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
	}
	waitFor(t, "the pods and their claims to be gone", 2*time.Minute, func(ctx context.Context) (bool, error) {
		pl, err1 := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		cl, err2 := c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		return err1 == nil && err2 == nil && len(pl.Items) == 0 && len(cl.Items) == 0, nil
	})
	for _, p := range pods {
		waitFor(t, "the allocations of "+p.nn.node.Name()+" to be gone", time.Minute, func(ctx context.Context) (bool, error) {
			resp, err := p.nn.stateClient.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
			return err == nil && len(resp.GetAllocations()) == 0, nil
		})
	}
}

// pingAcross: a and b, on nodes 0 and 1, on VLAN 100, ping each other from
// inside their containers; c, on node 2, on VLAN 200, reaches neither.
func (m *multinode) pingAcross(t *testing.T, guard *overlapGuard, blocks map[string]netip.Prefix) {
	// A namespace's template is named "net": one namespace per VLAN.
	tmpl := func(vlan int) (ns, name string) {
		ns = worldtest.Namespace(t, m.c)
		guard.watch(ns)
		return ns, claimTemplate(t, m.c, ns, m.class, map[string]any{"podIfName": "net1", "vlan": vlan, "ipPools": []string{mnIPPool}})
	}
	ns, t100 := tmpl(100)
	ns200, t200 := tmpl(200)
	ab := startPods(t, ns, t100, "v100", m.nodes[:2])
	cp := startPods(t, ns200, t200, "v200", m.nodes[2:3])
	defer deletePods(t, ns200, cp)
	defer deletePods(t, ns, ab)
	all := append(append([]mnPod{}, ab...), cp...)
	addrs := map[netip.Addr]string{}
	for _, p := range all {
		a := p.addr(t)
		if !blocks[p.nn.node.Name()].Contains(a) {
			t.Errorf("pod %s on %s has %s, outside its node's block %s", p.pod.Name, p.nn.node.Name(), a, blocks[p.nn.node.Name()])
		}
		if o, dup := addrs[a]; dup {
			t.Errorf("pods %s and %s both have %s", o, p.pod.Name, a)
		}
		addrs[a] = p.pod.Name
	}
	a, b, c := ab[0], ab[1], cp[0]
	for _, pair := range [][2]mnPod{{a, b}, {b, a}} {
		from, to := pair[0], pair[1]
		dst := to.addr(t)
		var out string
		waitFor(t, fmt.Sprintf("%s (%s) to answer %s's ping", to.pod.Name, dst, from.pod.Name), 30*time.Second, func(ctx context.Context) (bool, error) {
			var ok bool
			out, ok = from.ping(ctx, dst)
			return ok, nil
		})
		t.Logf("in %s's container on %s: %s", from.pod.Name, from.nn.node.Name(), out)
	}
	// VLAN 100 answers on the segment (above): a miss of c is its VLAN's.
	for _, to := range []mnPod{a, b} {
		if out, ok := c.ping(context.Background(), to.addr(t)); ok {
			t.Errorf("%s on VLAN 200 reached %s on VLAN 100: %s", c.pod.Name, to.pod.Name, out)
		}
		if out, ok := to.ping(context.Background(), c.addr(t)); ok {
			t.Errorf("%s on VLAN 100 reached %s on VLAN 200: %s", to.pod.Name, c.pod.Name, out)
		}
	}
}

// churn fills every device of every node at once, churnRounds times,
// checking each round's addresses for duplicates, and empties them; then
// nothing is left: no claim, no allocation, every device back in its host
// netns, no address in use.
func (m *multinode) churn(t *testing.T, guard *overlapGuard, blocks map[string]netip.Prefix) {
	ns := worldtest.Namespace(t, m.c)
	guard.watch(ns)
	tmpl := claimTemplate(t, m.c, ns, m.class, map[string]any{"podIfName": "net1", "ipPools": []string{mnIPPool}})
	var on []*netdraNode
	for range mnDevices {
		on = append(on, m.nodes...)
	}
	for r := range churnRounds {
		pods := startPods(t, ns, tmpl, fmt.Sprintf("r%d", r), on)
		seen := map[netip.Addr]string{}
		for _, p := range pods {
			a := p.addr(t)
			if o, dup := seen[a]; dup {
				t.Errorf("round %d: pods %s and %s both have %s", r, o, p.pod.Name, a)
			}
			if !blocks[p.nn.node.Name()].Contains(a) {
				t.Errorf("round %d: pod %s on %s has %s, outside its block", r, p.pod.Name, p.nn.node.Name(), a)
			}
			seen[a] = p.pod.Name
		}
		t.Logf("round %d: %d pods on %d nodes, %d distinct addresses", r, len(pods), len(m.nodes), len(seen))
		deletePods(t, ns, pods)
	}
	for i, nn := range m.nodes {
		for j := range mnDevices {
			if _, ok := link(t, nn.hostNS, mnDevice(i, j)); !ok {
				t.Errorf("%s is not back in the host netns of %s", mnDevice(i, j), nn.node.Name())
			}
		}
		nn.waitStatus(t, "no address of "+mnIPPool+" in use on "+nn.node.Name(), func(nc *v1alpha1.NodeConfig) bool {
			return ipPoolUsed(nc) == 0
		})
	}
}

// relabelAndRemove: node 2 leaves the selector, node 1 leaves the cluster;
// each one's NodeConfig goes; node 2's block is retained (its Node exists),
// node 1's released; node 0 keeps its block.
func (m *multinode) relabelAndRemove(t *testing.T, blocks map[string]netip.Prefix) {
	keep, relabelled, removed := m.nodes[0], m.nodes[2], m.nodes[1]
	m.relabel(t, relabelled.node.Name())
	now := m.waitBlocks(t, []*netdraNode{keep, removed}, relabelled)
	t.Logf("after relabelling %s: %v", relabelled.node.Name(), now)
	// The node goes down with its netdra pod: dra and nri first, then the
	// kubelet and containerd (Stop deletes the Node); the slices dra
	// published for it go with it.
	removed.dra.Kill()
	removed.nriP.Kill()
	if err := removed.node.Stop(); err != nil {
		t.Fatalf("stopping node %s: %v", removed.node.Name(), err)
	}
	// Stop deletes the Node while the kubelet still runs, which may
	// register it again before it stops: the Node is deleted once more.
	err := m.c.CoreV1().Nodes().Delete(context.Background(), removed.node.Name(), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	t.Logf("node %s stopped, its Node deleted", removed.node.Name())
	waitFor(t, "Node "+removed.node.Name()+" to be gone", time.Minute, func(ctx context.Context) (bool, error) {
		_, err := m.c.CoreV1().Nodes().Get(ctx, removed.node.Name(), metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	sliceSel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + removed.node.Name()}
	if err := m.c.ResourceV1().ResourceSlices().DeleteCollection(context.Background(), metav1.DeleteOptions{}, sliceSel); err != nil {
		t.Errorf("deleting the slices of %s: %v", removed.node.Name(), err)
	}
	now = m.waitBlocks(t, []*netdraNode{keep}, relabelled)
	t.Logf("after removing %s: %v", removed.node.Name(), now)
	for _, nn := range []*netdraNode{keep, relabelled} {
		if now[nn.node.Name()] != blocks[nn.node.Name()] {
			t.Errorf("node %s has block %s, had %s", nn.node.Name(), now[nn.node.Name()], blocks[nn.node.Name()])
		}
	}
}
