package plan

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/ippool"
)

func v4pool(mut ...func(*v1alpha1.AddressPool)) *v1alpha1.AddressPool {
	p := &v1alpha1.AddressPool{Name: "v4", Subnet: "10.0.0.0/24", BlockPrefixLength: 26}
	for _, m := range mut {
		m(p)
	}
	return p
}

// blocks is a status's blocks as "cidr=node" strings.
func blocks(st v1alpha1.AddressPoolStatus) []string {
	var out []string
	for _, b := range st.Blocks {
		s := b.CIDR + "=" + b.Node
		if b.Retained {
			s += " (retained)"
		}
		out = append(out, s)
	}
	return out
}

func recordOf(pool *v1alpha1.AddressPool, bs ...string) *v1alpha1.AddressPoolStatus {
	st := &v1alpha1.AddressPoolStatus{Name: pool.Name, Subnet: pool.Subnet, BlockPrefixLength: pool.BlockPrefixLength}
	for _, b := range bs {
		cidr, n, _ := strings.Cut(b, "=")
		st.Blocks = append(st.Blocks, v1alpha1.AddressBlock{CIDR: cidr, Node: n})
	}
	return st
}

// lowUsage is dra's count for node's blocks with free addresses left.
func lowUsage(t *testing.T, pool *v1alpha1.AddressPool, st v1alpha1.AddressPoolStatus, node string, free int64) v1alpha1.IPPoolUsage {
	t.Helper()
	ip, err := NodeIPPool(pool, blocksByNode(st)[node])
	if err != nil {
		t.Fatal(err)
	}
	p, err := ippool.Parse(v1alpha1.IPPoolSpecs([]v1alpha1.IPPool{ip})[0])
	if err != nil {
		t.Fatal(err)
	}
	return v1alpha1.IPPoolUsage{Name: pool.Name, RangeStart: ip.RangeStart, RangeEnd: ip.RangeEnd, Size: p.Size().String(), Free: fmt.Sprint(free)}
}

func TestCarve(t *testing.T) {
	v6 := &v1alpha1.AddressPool{Name: "v6", Subnet: "fd00:1::/48", BlockPrefixLength: 112}
	for _, tc := range []struct {
		name        string
		pool        *v1alpha1.AddressPool
		prev        []string
		nodes       []string
		present     []string // beside nodes
		want        []string
		wantStarved []string
	}{
		{name: "one block each, in name order", pool: v4pool(), nodes: []string{"b", "a"},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b"}},
		{name: "recorded blocks stay", pool: v4pool(), prev: []string{"10.0.0.128/26=a"}, nodes: []string{"a", "b"},
			want: []string{"10.0.0.0/26=b", "10.0.0.128/26=a"}},
		{name: "a node gone releases its block", pool: v4pool(), prev: []string{"10.0.0.0/26=a", "10.0.0.64/26=gone"}, nodes: []string{"a"},
			want: []string{"10.0.0.0/26=a"}},
		{name: "a node not governed any more keeps its block while it exists", pool: v4pool(),
			prev: []string{"10.0.0.0/26=a", "10.0.0.64/26=out"}, nodes: []string{"a", "new"}, present: []string{"out"},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=out (retained)", "10.0.0.128/26=new"}},
		{name: "a retained block is taken up again when its node is governed again", pool: v4pool(),
			prev: []string{"10.0.0.64/26=out"}, nodes: []string{"a", "out"},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=out"}},
		{name: "retained blocks are never handed to another node, even when it starves", pool: v4pool(),
			prev: []string{"10.0.0.0/26=r1", "10.0.0.64/26=r2", "10.0.0.128/26=r3", "10.0.0.192/26=r4"}, nodes: []string{"a"},
			present:     []string{"r1", "r2", "r3", "r4"},
			want:        []string{"10.0.0.0/26=r1 (retained)", "10.0.0.64/26=r2 (retained)", "10.0.0.128/26=r3 (retained)", "10.0.0.192/26=r4 (retained)"},
			wantStarved: []string{"a"}},
		{name: "a block recorded twice stays with the first", pool: v4pool(), prev: []string{"10.0.0.0/26=a", "10.0.0.0/26=b"}, nodes: []string{"a", "b"},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b"}},
		{name: "blocks of another size are released", pool: v4pool(func(p *v1alpha1.AddressPool) { p.BlockPrefixLength = 25 }),
			prev: []string{"10.0.0.64/26=a"}, nodes: []string{"a"}, want: []string{"10.0.0.0/25=a"}},
		{name: "blocks outside a new subnet are released", pool: v4pool(), prev: []string{"10.9.0.0/26=a", "garbage=a"}, nodes: []string{"a"},
			want: []string{"10.0.0.0/26=a"}},
		{name: "exhausted", pool: v4pool(), nodes: []string{"a", "b", "c", "d", "e"},
			want:        []string{"10.0.0.0/26=a", "10.0.0.64/26=b", "10.0.0.128/26=c", "10.0.0.192/26=d"},
			wantStarved: []string{"e"}},
		{name: "the gateway's block is never handed out", pool: v4pool(func(p *v1alpha1.AddressPool) { p.Gateway = "10.0.0.1" }),
			nodes: []string{"a"}, want: []string{"10.0.0.64/26=a"}},
		{name: "a whole excluded block is skipped", pool: v4pool(func(p *v1alpha1.AddressPool) { p.Exclude = []string{"10.0.0.0/25"} }),
			nodes: []string{"a"}, want: []string{"10.0.0.128/26=a"}},
		{name: "ipv6", pool: v6, nodes: []string{"a", "b"}, want: []string{"fd00:1::/112=a", "fd00:1::1:0/112=b"}},
		{name: "ipv6 jumps over a huge exclusion", pool: &v1alpha1.AddressPool{Name: "v6", Subnet: "fd00:1::/48", BlockPrefixLength: 112, Exclude: []string{"fd00:1::/64"}},
			nodes: []string{"a"}, want: []string{"fd00:1:0:1::/112=a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var prev *v1alpha1.AddressPoolStatus
			if tc.prev != nil {
				prev = recordOf(tc.pool, tc.prev...)
			}
			st, starved := Carve(tc.pool, prev, tc.nodes, append(slices.Clone(tc.nodes), tc.present...), nil)
			if diff := cmp.Diff(tc.want, blocks(st)); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantStarved, starved); diff != "" {
				t.Errorf("starved (-want +got):\n%s", diff)
			}
		})
	}
}

func TestCarve_Low(t *testing.T) {
	pool := v4pool(func(p *v1alpha1.AddressPool) { p.Subnet = "10.0.0.0/22"; p.MaxBlocksPerNode = 2 })
	st, _ := Carve(pool, nil, []string{"a", "b"}, nil, nil)
	for _, tc := range []struct {
		name  string
		usage map[string]v1alpha1.IPPoolUsage
		want  []string
	}{
		{name: "no count: nothing added", want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b"}},
		{name: "enough free", usage: map[string]v1alpha1.IPPoolUsage{"a": lowUsage(t, pool, st, "a", 16)},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b"}},
		{name: "low: the lowest free block (the next is b's)", usage: map[string]v1alpha1.IPPoolUsage{"a": lowUsage(t, pool, st, "a", 15)},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b", "10.0.0.128/26=a"}},
		{name: "low: the next block when free", usage: map[string]v1alpha1.IPPoolUsage{"b": lowUsage(t, pool, st, "b", 0)},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b", "10.0.0.128/26=b"}},
		{name: "a count of another range says nothing", usage: map[string]v1alpha1.IPPoolUsage{"a": {Name: "v4", RangeStart: "10.0.0.1", RangeEnd: "10.0.0.127", Size: "127", Free: "0"}},
			want: []string{"10.0.0.0/26=a", "10.0.0.64/26=b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, _ := Carve(pool, &st, []string{"a", "b"}, nil, tc.usage)
			if diff := cmp.Diff(tc.want, blocks(got)); diff != "" {
				t.Errorf("blocks (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("at maxBlocksPerNode: nothing added", func(t *testing.T) {
		two, _ := Carve(pool, &st, []string{"a", "b"}, nil, map[string]v1alpha1.IPPoolUsage{"b": lowUsage(t, pool, st, "b", 0)})
		got, starved := Carve(pool, &two, []string{"a", "b"}, nil, map[string]v1alpha1.IPPoolUsage{"b": lowUsage(t, pool, two, "b", 0)})
		if diff := cmp.Diff(blocks(two), blocks(got)); diff != "" || starved != nil {
			t.Errorf("blocks (-want +got):\n%s starved %v", diff, starved)
		}
	})
}

func TestNodeIPPool(t *testing.T) {
	pool := v4pool(func(p *v1alpha1.AddressPool) {
		p.Subnet, p.Gateway, p.Exclude = "10.0.0.0/16", "10.0.255.254", []string{"10.0.0.5"}
		p.Routes = []v1alpha1.IPPoolRoute{{Destination: "10.1.0.0/16"}}
	})
	for _, tc := range []struct {
		name    string
		blocks  []string
		want    v1alpha1.IPPool
		wantErr string
	}{
		{name: "first block: no network address", blocks: []string{"10.0.0.0/26"},
			want: v1alpha1.IPPool{Name: "v4", Subnet: "10.0.0.0/16", RangeStart: "10.0.0.1", RangeEnd: "10.0.0.63", Gateway: "10.0.255.254",
				Routes: []v1alpha1.IPPoolRoute{{Destination: "10.1.0.0/16"}}, Exclude: []string{"10.0.0.5"}}},
		{name: "a gap is excluded", blocks: []string{"10.0.1.64/26", "10.0.1.0/26", "10.0.2.0/26"},
			want: v1alpha1.IPPool{Name: "v4", Subnet: "10.0.0.0/16", RangeStart: "10.0.1.0", RangeEnd: "10.0.2.63", Gateway: "10.0.255.254",
				Routes: []v1alpha1.IPPoolRoute{{Destination: "10.1.0.0/16"}}, Exclude: []string{"10.0.0.5", "10.0.1.128/25"}}},
		{name: "the gateway's block", blocks: []string{"10.0.255.192/26"}, wantErr: "holds the gateway"},
		{name: "no block", wantErr: "no block"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bs []netip.Prefix
			for _, b := range tc.blocks {
				bs = append(bs, netip.MustParsePrefix(b))
			}
			got, err := NodeIPPool(pool, bs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

func TestRangePrefixes(t *testing.T) {
	got := rangePrefixes(netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.8"))
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32"), netip.MustParsePrefix("10.0.0.2/31"),
		netip.MustParsePrefix("10.0.0.4/30"), netip.MustParsePrefix("10.0.0.8/32")}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Prefix) bool { return a == b })); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// TestCarve_NeverOverlaps churns nodes in and out and runs some low, for
// IPv4 and IPv6 pools: after every step no two blocks overlap, every block
// is a valid block of the pool, a node keeps the blocks it held while it
// stays, and each node's node-local pool is valid and disjoint from every
// other node's.
func TestCarve_NeverOverlaps(t *testing.T) {
	for _, pool := range []*v1alpha1.AddressPool{
		{Name: "v4", Subnet: "10.0.0.0/20", BlockPrefixLength: 27, Gateway: "10.0.0.1", Exclude: []string{"10.0.3.0/24"}, MaxBlocksPerNode: 3},
		{Name: "v6", Subnet: "fd00::/104", BlockPrefixLength: 112, MaxBlocksPerNode: 4},
	} {
		t.Run(pool.Name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			var prev *v1alpha1.AddressPoolStatus
			live := map[string]bool{}
			for step := range 250 {
				churn(rng, live)
				nodes := slices.Sorted(func(yield func(string) bool) {
					for n := range live {
						if !yield(n) {
							return
						}
					}
				})
				usage := map[string]v1alpha1.IPPoolUsage{}
				if prev != nil {
					for n, bs := range blocksByNode(*prev) {
						if live[n] && rng.IntN(4) == 0 && len(bs) > 0 {
							usage[n] = lowUsage(t, pool, *prev, n, 0)
						}
					}
				}
				st, _ := Carve(pool, prev, nodes, nil, usage)
				checkCarving(t, step, pool, prev, live, st)
				prev = &st
			}
		})
	}
}

func churn(rng *rand.Rand, live map[string]bool) {
	for range 3 {
		n := fmt.Sprintf("node-%02d", rng.IntN(60))
		if rng.IntN(3) == 0 {
			delete(live, n)
		} else {
			live[n] = true
		}
	}
}

func checkCarving(t *testing.T, step int, pool *v1alpha1.AddressPool, prev *v1alpha1.AddressPoolStatus, live map[string]bool, st v1alpha1.AddressPoolStatus) {
	t.Helper()
	sub := netip.MustParsePrefix(pool.Subnet)
	var all []netip.Prefix
	for _, b := range st.Blocks {
		p := netip.MustParsePrefix(b.CIDR)
		if !live[b.Node] || p.Bits() != int(pool.BlockPrefixLength) || !sub.Contains(p.Addr()) {
			t.Fatalf("step %d: block %s of %s: not a live node's block of the pool", step, b.CIDR, b.Node)
		}
		for _, q := range all {
			if q.Overlaps(p) {
				t.Fatalf("step %d: %s overlaps %s", step, p, q)
			}
		}
		all = append(all, p)
	}
	if prev != nil {
		now := map[string]bool{}
		for _, b := range blocks(st) {
			now[b] = true
		}
		for _, b := range prev.Blocks {
			if live[b.Node] && !now[b.CIDR+"="+b.Node] {
				t.Fatalf("step %d: %s lost %s", step, b.Node, b.CIDR)
			}
		}
	}
	var ranges []*ippool.Pool
	for n, bs := range blocksByNode(st) {
		ip, err := NodeIPPool(pool, bs)
		if err != nil {
			t.Fatalf("step %d: node %s: %v", step, n, err)
		}
		ip.Name = n
		p, err := ippool.Parse(v1alpha1.IPPoolSpecs([]v1alpha1.IPPool{ip})[0])
		if err != nil {
			t.Fatalf("step %d: node %s: %v", step, n, err)
		}
		for _, q := range ranges {
			for _, b := range bs {
				if a := b.Addr().Next(); p.Usable(a) && q.Usable(a) {
					t.Fatalf("step %d: %s usable on nodes %s and %s", step, a, n, q.Name)
				}
			}
		}
		ranges = append(ranges, p)
	}
}

func TestCarveAddressPools(t *testing.T) {
	c := cc("a", t0, nil)
	c.Spec.Spec.IPPools = []v1alpha1.IPPool{{Name: "local", Subnet: "192.168.0.0/24"}}
	c.Spec.AddressPools = []v1alpha1.AddressPool{*v4pool()}
	configs := []v1alpha1.ClusterConfig{c}
	res := Compute([]Node{node("n1"), node("n2"), node("n3"), node("n4"), node("n5")}, configs, now)
	CarveAddressPools(&res, configs, nil, now)
	st := res.Statuses["a"]
	if diff := cmp.Diff([]string{"10.0.0.0/26=n1", "10.0.0.64/26=n2", "10.0.0.128/26=n3", "10.0.0.192/26=n4"}, blocks(st.AddressPools[0])); diff != "" {
		t.Errorf("blocks (-want +got):\n%s", diff)
	}
	cond := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionAddressPoolExhausted)
	if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, `pool "v4"`) || !strings.Contains(cond.Message, "n5") {
		t.Errorf("exhausted condition %+v, want True naming pool v4 and node n5", cond)
	}
	n1 := res.Assignments["n1"].Spec.IPPools
	if len(n1) != 2 || n1[0].Name != "local" || n1[1].Name != "v4" || n1[1].RangeStart != "10.0.0.1" || n1[1].RangeEnd != "10.0.0.63" {
		t.Errorf("n1's ipPools %+v, want local then v4 10.0.0.1-10.0.0.63", n1)
	}
	if n5 := res.Assignments["n5"].Spec.IPPools; len(n5) != 1 {
		t.Errorf("n5's ipPools %+v, want local only", n5)
	}
	if len(c.Spec.Spec.IPPools) != 1 {
		t.Errorf("the ClusterConfig's spec changed: %+v", c.Spec.Spec.IPPools)
	}

	bad := c.DeepCopy()
	bad.Spec.AddressPools[0].Subnet = "192.168.0.0/16"
	res = Compute([]Node{node("n1")}, []v1alpha1.ClusterConfig{*bad}, now)
	CarveAddressPools(&res, []v1alpha1.ClusterConfig{*bad}, nil, now)
	cond = meta.FindStatusCondition(res.Statuses["a"].Conditions, v1alpha1.ConditionInvalidAddressPool)
	if cond == nil || !strings.Contains(cond.Message, "spec.addressPools[0].subnet") {
		t.Errorf("invalid condition %+v, want one naming spec.addressPools[0].subnet", cond)
	}
}
