package e2e

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/ippool"
)

// overlapGuard checks, every 200 ms for as long as the test runs, what must
// hold at every moment and not only at the checkpoints: no two nodes have
// overlapping blocks in the ClusterConfig's status, no two generated
// NodeConfigs can hand out one address, and no address is in the status of
// two ResourceClaims of the watched namespaces.
type overlapGuard struct {
	m      *multinode
	mu     sync.Mutex
	ns     []string
	seen   []string // each violation once
	checks int
}

// startGuard runs the guard until the test ends, then fails the test with
// what it saw.
func (m *multinode) startGuard(t *testing.T) *overlapGuard {
	g := &overlapGuard{m: m}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			g.check(ctx)
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		t.Logf("the overlap guard checked the cluster %d times", g.checks)
		g.report(t)
	})
	return g
}

// watch adds a namespace whose claims the guard checks.
func (g *overlapGuard) watch(ns string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.ns = append(g.ns, ns)
}

// report fails t with every violation seen so far.
func (g *overlapGuard) report(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, v := range g.seen {
		t.Error(v)
	}
}

func (g *overlapGuard) check(ctx context.Context) {
	var found []string
	if cc, err := g.m.clusterConfig(ctx); err == nil {
		found = append(found, blockOverlaps(cc)...)
	}
	if ncs, err := g.m.generated(ctx); err == nil {
		found = append(found, rangeOverlaps(ncs)...)
	}
	g.mu.Lock()
	namespaces := slices.Clone(g.ns)
	g.mu.Unlock()
	found = append(found, g.claimDuplicates(ctx, namespaces)...)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checks++
	for _, f := range found {
		if !slices.Contains(g.seen, f) {
			g.seen = append(g.seen, f)
		}
	}
}

// blockOverlaps names the blocks of the cluster pool that overlap.
func blockOverlaps(cc *v1alpha1.ClusterConfig) []string {
	var out []string
	for _, p := range cc.Status.AddressPools {
		for i, a := range p.Blocks {
			for _, b := range p.Blocks[i+1:] {
				pa, errA := netip.ParsePrefix(a.CIDR)
				pb, errB := netip.ParsePrefix(b.CIDR)
				if errA != nil || errB != nil || pa.Overlaps(pb) {
					out = append(out, fmt.Sprintf("pool %s: block %s of %s overlaps block %s of %s", p.Name, a.CIDR, a.Node, b.CIDR, b.Node))
				}
			}
		}
	}
	return out
}

// rangeOverlaps names the addresses two generated NodeConfigs' pools
// mnIPPool could both hand out.
func rangeOverlaps(ncs map[string]*v1alpha1.NodeConfig) []string {
	owner := map[netip.Addr]string{}
	var out []string
	for _, node := range slices.Sorted(maps.Keys(ncs)) {
		for _, a := range usableAddrs(ncs[node]) {
			if o, ok := owner[a]; ok {
				out = append(out, fmt.Sprintf("address %s is in the NodeConfigs of %s and %s", a, o, node))
				continue
			}
			owner[a] = node
		}
	}
	return out
}

// usableAddrs are the addresses the NodeConfig's pool mnIPPool hands out.
func usableAddrs(nc *v1alpha1.NodeConfig) []netip.Addr {
	for _, p := range nc.Spec.IPPools {
		if p.Name != mnIPPool {
			continue
		}
		pool, err := ippool.Parse(ippool.Spec{Name: p.Name, Subnet: p.Subnet, RangeStart: p.RangeStart, RangeEnd: p.RangeEnd,
			Gateway: p.Gateway, Exclude: p.Exclude})
		if err != nil {
			return nil
		}
		var out []netip.Addr
		for a := pool.Start; a.IsValid() && pool.Contains(a); a = a.Next() {
			if pool.Usable(a) {
				out = append(out, a)
			}
		}
		return out
	}
	return nil
}

// claimDuplicates names the addresses in the status of two claims at once.
func (g *overlapGuard) claimDuplicates(ctx context.Context, namespaces []string) []string {
	holder := map[string]string{}
	var out []string
	for _, ns := range namespaces {
		claims, err := g.m.c.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			continue
		}
		for _, cl := range claims.Items {
			for _, d := range cl.Status.Devices {
				if d.NetworkData == nil {
					continue
				}
				for _, ip := range d.NetworkData.IPs {
					addr, _, _ := strings.Cut(ip, "/")
					who := ns + "/" + cl.Name
					if h, ok := holder[addr]; ok && h != who {
						out = append(out, fmt.Sprintf("address %s is held by claims %s and %s at once", addr, h, who))
					}
					holder[addr] = who
				}
			}
		}
	}
	return out
}
