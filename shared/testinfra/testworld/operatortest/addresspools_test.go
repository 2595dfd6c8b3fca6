package operatortest

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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/services/operator/controller"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/ippool"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// stoppableOperator runs an operator in-process; stop ends it and waits
// (the test's end does too).
func (w *world) stoppableOperator() (stop func()) {
	w.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- controller.Run(ctx, worldtest.Logger(w.t), w.rc, controller.Options{MetricsAddr: "0", Refresh: time.Minute})
	}()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			w.t.Errorf("operator: %v", err)
		}
	}
	w.t.Cleanup(stop)
	return stop
}

// poolSpec is a ClusterConfig spec with a v4 cluster pool of four /28
// blocks and a v6 one.
func poolSpec() v1alpha1.ClusterConfigSpec {
	return v1alpha1.ClusterConfigSpec{
		NodeSelector: selector("pool=yes"),
		Spec:         spec("pools.example.com"),
		AddressPools: []v1alpha1.AddressPool{
			{Name: "v4", Subnet: "10.50.0.0/26", BlockPrefixLength: 28, Routes: []v1alpha1.IPPoolRoute{{Destination: "10.51.0.0/16", Gateway: "10.50.0.62"}}},
			{Name: "v6", Subnet: "fd00:50::/64", BlockPrefixLength: 120},
		},
	}
}

// blockMap is a ClusterConfig's recorded blocks: "pool cidr" -> node.
func (w *world) blockMap(name string) map[string]string {
	w.t.Helper()
	var cc v1alpha1.ClusterConfig
	w.get(name, &cc)
	out := map[string]string{}
	for _, p := range cc.Status.AddressPools {
		for _, b := range p.Blocks {
			out[p.Name+" "+b.CIDR] = b.Node
		}
	}
	return out
}

// blocksAre waits until the ClusterConfig records exactly the nodes'
// blocks counts (pool -> node -> blocks) and every node's NodeConfig holds
// the node-local pools of its blocks, disjoint from every other node's.
func (w *world) blocksAre(name string, want map[string]map[string]int) map[string]string {
	w.t.Helper()
	w.eventually(fmt.Sprintf("ClusterConfig %s blocks %v", name, want), func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, key(name), &cc); err != nil {
			return err
		}
		got := map[string]map[string]int{}
		for _, p := range cc.Status.AddressPools {
			got[p.Name] = map[string]int{}
			for _, b := range p.Blocks {
				got[p.Name][b.Node]++
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("blocks %v", cc.Status.AddressPools)
		}
		return w.nodePoolsMatch(ctx, &cc)
	})
	return w.blockMap(name)
}

// nodePoolsMatch checks that each node holding blocks has a NodeConfig
// whose ipPools of the cluster pools cover exactly its blocks, and that no
// address is usable on two nodes.
func (w *world) nodePoolsMatch(ctx context.Context, cc *v1alpha1.ClusterConfig) error {
	type owned struct {
		node  string
		pool  *ippool.Pool
		block netip.Prefix
	}
	var all []owned
	for _, ps := range cc.Status.AddressPools {
		for _, b := range ps.Blocks {
			if b.Retained {
				// Not governed: no NodeConfig of the operator's; the
				// block is out of everyone's NodeConfig (checked below
				// through the others' pools).
				if err := w.c.Get(ctx, key(b.Node), &v1alpha1.NodeConfig{}); !apierrors.IsNotFound(err) {
					return fmt.Errorf("node %s retains block %s but still has a NodeConfig: %v", b.Node, b.CIDR, err)
				}
				all = append(all, owned{node: b.Node, block: netip.MustParsePrefix(b.CIDR)})
				continue
			}
			var nc v1alpha1.NodeConfig
			if err := w.c.Get(ctx, key(b.Node), &nc); err != nil {
				return err
			}
			i := slices.IndexFunc(nc.Spec.IPPools, func(p v1alpha1.IPPool) bool { return p.Name == ps.Name })
			if i < 0 {
				return fmt.Errorf("NodeConfig %s has no ip pool %s: %+v", b.Node, ps.Name, nc.Spec.IPPools)
			}
			p, err := ippool.Parse(v1alpha1.IPPoolSpecs(nc.Spec.IPPools[i : i+1])[0])
			if err != nil {
				return fmt.Errorf("NodeConfig %s: %w", b.Node, err)
			}
			block := netip.MustParsePrefix(b.CIDR)
			if a := block.Addr().Next(); !p.Usable(a) {
				return fmt.Errorf("NodeConfig %s pool %s %s-%s does not hand out %s of its block %s", b.Node, ps.Name, p.Start, p.End, a, block)
			}
			all = append(all, owned{b.Node, p, block})
		}
	}
	for _, o := range all {
		if o.pool == nil { // retained: hands out nothing
			continue
		}
		for _, other := range all {
			if other.node == o.node {
				continue
			}
			for a := other.block.Addr(); other.block.Contains(a); a = a.Next() {
				if o.pool.Usable(a) {
					return fmt.Errorf("%s of %s's block %s is usable on %s too (%s-%s)", a, other.node, other.block, o.node, o.pool.Start, o.pool.End)
				}
			}
		}
	}
	return nil
}

// reportLow writes node's NodeConfig status as dra would with no free
// address left in its pool of name.
func (w *world) reportLow(node, name string) {
	w.t.Helper()
	w.retry(func(ctx context.Context) error {
		var nc v1alpha1.NodeConfig
		if err := w.c.Get(ctx, key(node), &nc); err != nil {
			return err
		}
		i := slices.IndexFunc(nc.Spec.IPPools, func(p v1alpha1.IPPool) bool { return p.Name == name })
		p, err := ippool.Parse(v1alpha1.IPPoolSpecs(nc.Spec.IPPools[i : i+1])[0])
		if err != nil {
			w.t.Fatal(err)
		}
		nc.Status.IPPools = []v1alpha1.IPPoolUsage{{Name: name, RangeStart: nc.Spec.IPPools[i].RangeStart, RangeEnd: nc.Spec.IPPools[i].RangeEnd,
			Size: p.Size().String(), Used: int32(p.Size().Int64()), Free: "0"}}
		return w.c.Status().Update(ctx, &nc)
	})
}

// Three nodes, one relabelled out (its blocks retained while the Node
// exists, released when it is deleted), one removed, two added, the
// operator restarted, a node running low, the pool exhausted: blocks stay
// with their nodes, are released when a node leaves, never overlap, and
// survive the restart.
func TestOperator_AddressPools(t *testing.T) {
	w := newWorld(t)
	for _, n := range []string{"n1", "n2", "n3"} {
		w.node(n, "pool=yes")
	}
	cc := &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "pools"}, Spec: poolSpec()}
	if err := w.c.Create(context.Background(), cc); err != nil {
		t.Fatal(err)
	}
	stop := w.stoppableOperator()
	first := w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 1, "n2": 1, "n3": 1}, "v6": {"n1": 1, "n2": 1, "n3": 1}})
	t.Logf("blocks: %v", first)

	w.label("n2", "pool=no")
	w.ungoverned("n2")
	afterRelabel := w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 1, "n2": 1, "n3": 1}, "v6": {"n1": 1, "n2": 1, "n3": 1}})
	w.retained("pools", "n2")
	w.delete(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n2"}})
	w.delete(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n3"}})
	w.ungoverned("n3")
	afterDelete := w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 1}, "v6": {"n1": 1}})
	keptBlocks(t, first, afterRelabel, "n1", "n2", "n3")
	keptBlocks(t, first, afterDelete, "n1")

	stop() // a new operator reads the blocks back from the status
	w.node("n4", "pool=yes")
	w.node("n5", "pool=yes")
	w.stoppableOperator()
	restarted := w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 1, "n4": 1, "n5": 1}, "v6": {"n1": 1, "n4": 1, "n5": 1}})
	keptBlocks(t, first, restarted, "n1")

	w.reportLow("n1", "v4")
	w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 2, "n4": 1, "n5": 1}, "v6": {"n1": 1, "n4": 1, "n5": 1}})
	w.node("n6", "pool=yes")
	w.eventually("the exhausted condition naming v4 and n6", func(ctx context.Context) error {
		var got v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, key("pools"), &got); err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionAddressPoolExhausted)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, `pool "v4"`) || !strings.Contains(c.Message, "n6") {
			return fmt.Errorf("condition %+v", c)
		}
		t.Logf("exhausted: %s", c.Message)
		return nil
	})
	w.blocksAre("pools", map[string]map[string]int{"v4": {"n1": 2, "n4": 1, "n5": 1}, "v6": {"n1": 1, "n4": 1, "n5": 1, "n6": 1}})
}

// retained waits until every block node holds in ClusterConfig name is
// marked retained.
func (w *world) retained(name, node string) {
	w.t.Helper()
	w.eventually(fmt.Sprintf("%s's blocks of %s retained", node, name), func(ctx context.Context) error {
		var cc v1alpha1.ClusterConfig
		if err := w.c.Get(ctx, key(name), &cc); err != nil {
			return err
		}
		for _, p := range cc.Status.AddressPools {
			for _, b := range p.Blocks {
				if b.Node == node && !b.Retained {
					return fmt.Errorf("block %s of pool %s not retained", b.CIDR, p.Name)
				}
			}
		}
		return nil
	})
}

// keptBlocks fails unless every block of nodes in before is still theirs
// in after.
func keptBlocks(t *testing.T, before, after map[string]string, nodes ...string) {
	t.Helper()
	for b, n := range before {
		if slices.Contains(nodes, n) && after[b] != n {
			t.Errorf("block %s of %s is now %q's", b, n, after[b])
		}
	}
}

// The apiserver rejects bad address pools with a message naming the field,
// and ValidateClusterConfig rejects the same, naming the same field.
func TestCRD_RejectsBadAddressPools(t *testing.T) {
	w := newWorld(t)
	for _, tt := range []struct {
		name   string
		modify func(s *v1alpha1.ClusterConfigSpec)
		field  string
		server string
	}{
		{"block not longer than the subnet", func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].BlockPrefixLength = 26 },
			"addressPools[0].blockPrefixLength", "spec.addressPools[0].blockPrefixLength: Invalid value"},
		{"IPv4 block longer than 32", func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].BlockPrefixLength = 40 },
			"addressPools[0].blockPrefixLength", "blockPrefixLength must be longer than the subnet's prefix and at most 32 (IPv4) or 128 (IPv6)"},
		{"subnet with host bits", func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[1].Subnet = "fd00:50::1/64" },
			"addressPools[1].subnet", "spec.addressPools[1].subnet: Invalid value"},
		{"gateway outside", func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[0].Gateway = "10.9.0.1" },
			"addressPools[0].gateway", "gateway must be inside subnet"},
		{"name of a node-local pool", func(s *v1alpha1.ClusterConfigSpec) {
			s.Spec.IPPools = []v1alpha1.IPPool{{Name: "v4", Subnet: "192.168.0.0/24"}}
		}, "addressPools[0].name", "an address pool's name must differ from the names of spec.ipPools"},
		{"duplicate names", func(s *v1alpha1.ClusterConfigSpec) { s.AddressPools[1].Name = "v4" },
			"addressPools[1].name", `spec.addressPools[1]: Duplicate value: {"name":"v4"}`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := poolSpec()
			tt.modify(&s)
			err := v1alpha1.ValidateClusterConfig(&s)
			if err == nil || !strings.HasPrefix(err.Error(), tt.field+":") {
				t.Errorf("ValidateClusterConfig: %v, want an error naming %s", err, tt.field)
			}
			err = w.c.Create(context.Background(), &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: s})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.server) {
				t.Errorf("apiserver: %v, want Invalid with %q", err, tt.server)
			}
		})
	}
	good := poolSpec()
	if err := w.c.Create(context.Background(), &v1alpha1.ClusterConfig{ObjectMeta: metav1.ObjectMeta{Name: "good"}, Spec: good}); err != nil {
		t.Errorf("create a valid ClusterConfig: %v", err)
	}
}
