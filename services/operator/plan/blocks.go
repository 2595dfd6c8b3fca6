package plan

import (
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	"github.com/netdra/netdra/shared/apis/v1alpha1"
	"github.com/netdra/netdra/shared/ippool"
)

// Cluster address pools, the rules:
//   - A pool's subnet is cut into aligned blocks of blockPrefixLength
//     bits. The block holding the gateway, and blocks with no address left
//     to hand out (all excluded, or the IPv4 network and broadcast
//     addresses only), are never handed out.
//   - The blocks handed out are the ClusterConfig's status, read back at
//     each reconcile: a recorded block stays with its node while the node
//     is governed by the ClusterConfig, is a valid block of the pool's
//     current subnet and size, and the node holds no more than
//     maxBlocksPerNode; otherwise it is released. A block is never
//     recorded for two nodes (the first, in address order, keeps it).
//   - A node the ClusterConfig no longer governs (relabelled, or taken by
//     another) keeps its recorded blocks, marked retained, for as long as
//     the Node exists: its pods may still hold addresses of them, and
//     handing them to another node would make duplicates. It gets no new
//     block, and no NodeConfig of them; it takes them up again if governed
//     again. A block is released when its Node is deleted.
//   - A governed node without a block gets one; a node whose blocks run
//     low (dra reports, for the range the operator wrote, fewer free
//     addresses than minFreeAddresses) gets one more, up to
//     maxBlocksPerNode. A new block is the one right after the node's
//     last, when free (so the node's range stays whole), else the lowest
//     free one. Nodes are served in name order.
//   - A node's blocks are one node-local pool of the pool's name: the
//     pool's subnet (the addresses get its prefix length), a range from
//     its first block to its last, the gaps between them excluded.

// Carve returns pool's status, given the status recorded before (nil: none),
// the nodes it serves, the nodes that exist (for the retained blocks) and
// dra's counts per node of the node-local pool of pool's name; and the
// nodes that needed a block and got none (the pool is exhausted). pool
// must pass v1alpha1.ValidateAddressPool.
func Carve(pool *v1alpha1.AddressPool, prev *v1alpha1.AddressPoolStatus, nodes, present []string, usage map[string]v1alpha1.IPPoolUsage) (v1alpha1.AddressPoolStatus, []string) {
	c := newCarving(pool)
	c.keep(prev, nodes, present)
	var starved []string
	for _, n := range slices.Sorted(slices.Values(nodes)) {
		held := c.byNode[n]
		if len(held) > 0 && (len(held) >= c.maxBlocks || !c.low(n, usage)) {
			continue
		}
		if !c.grant(n) {
			starved = append(starved, n)
		}
	}
	return c.status(), starved
}

// carving is one pool's blocks while Carve decides.
type carving struct {
	pool      *v1alpha1.AddressPool
	subnet    netip.Prefix
	bits      int
	maxBlocks int
	taken     map[netip.Prefix]string
	byNode    map[string][]netip.Prefix
	retained  map[string]bool       // nodes not governed that keep their blocks
	usable    map[netip.Prefix]bool // a block alone makes a valid pool
}

func newCarving(pool *v1alpha1.AddressPool) *carving {
	maxBlocks := int(pool.MaxBlocksPerNode)
	if maxBlocks <= 0 {
		maxBlocks = v1alpha1.DefaultMaxBlocksPerNode
	}
	return &carving{pool: pool, subnet: netip.MustParsePrefix(pool.Subnet), bits: int(pool.BlockPrefixLength),
		maxBlocks: maxBlocks, taken: map[netip.Prefix]string{}, byNode: map[string][]netip.Prefix{}, retained: map[string]bool{},
		usable: map[netip.Prefix]bool{}}
}

// keep takes the recorded blocks that still hold (see the rules).
func (c *carving) keep(prev *v1alpha1.AddressPoolStatus, nodes, present []string) {
	if prev == nil {
		return
	}
	for _, b := range prev.Blocks {
		p, err := netip.ParsePrefix(b.CIDR)
		governed := slices.Contains(nodes, b.Node)
		if err != nil || (!governed && !slices.Contains(present, b.Node)) || len(c.byNode[b.Node]) >= c.maxBlocks || !c.fits(b.Node, p) {
			continue
		}
		c.take(p, b.Node)
		if !governed {
			c.retained[b.Node] = true
		}
	}
}

// free reports whether p is a block of the pool that nobody holds and that
// has an address to hand out.
func (c *carving) free(p netip.Prefix) bool {
	if p.Bits() != c.bits || p != p.Masked() || !c.subnet.Contains(p.Addr()) || p.Addr().Is4() != c.subnet.Addr().Is4() {
		return false
	}
	if _, held := c.taken[p]; held {
		return false
	}
	ok, known := c.usable[p]
	if !known {
		_, err := NodeIPPool(c.pool, []netip.Prefix{p})
		ok = err == nil
		c.usable[p] = ok
	}
	return ok
}

func (c *carving) take(p netip.Prefix, node string) {
	c.taken[p] = node
	c.byNode[node] = append(c.byNode[node], p)
	slices.SortFunc(c.byNode[node], comparePrefix)
}

// low reports whether dra counts fewer free addresses than the pool's
// minimum in node's blocks, for the very range the operator wrote (a count
// of an older range says nothing).
func (c *carving) low(node string, usage map[string]v1alpha1.IPPoolUsage) bool {
	u, ok := usage[node]
	if !ok {
		return false
	}
	want, err := NodeIPPool(c.pool, c.byNode[node])
	if err != nil || u.RangeStart != want.RangeStart || u.RangeEnd != want.RangeEnd {
		return false
	}
	parsed, err := ippool.Parse(v1alpha1.IPPoolSpecs([]v1alpha1.IPPool{want})[0])
	free, ok := new(big.Int).SetString(u.Free, 10)
	if err != nil || !ok || u.Size != parsed.Size().String() {
		return false
	}
	return free.Cmp(big.NewInt(int64(MinFree(c.pool)))) < 0
}

// MinFree is pool's minFreeAddresses, or its default: a quarter of a
// block, between 1 and 1024.
func MinFree(pool *v1alpha1.AddressPool) int32 {
	if pool.MinFreeAddresses != nil {
		return *pool.MinFreeAddresses
	}
	hostBits := netip.MustParsePrefix(pool.Subnet).Addr().BitLen() - int(pool.BlockPrefixLength)
	if hostBits >= 12 {
		return 1024
	}
	return max(1, int32(1)<<hostBits/4)
}

// grant gives node one more block: right after its last when that fits,
// else the lowest that fits. It reports false when none does (or the
// status holds MaxAddressPoolBlocks already). The walk is bounded: past
// the blocks held, a walk of that many more finds a free one unless
// gateway or exclusions refuse it.
func (c *carving) grant(node string) bool {
	if len(c.taken) >= v1alpha1.MaxAddressPoolBlocks {
		return false
	}
	if held := c.byNode[node]; len(held) > 0 {
		if next, ok := c.after(held[len(held)-1]); ok && c.fits(node, next) {
			c.take(next, node)
			return true
		}
	}
	steps := 2*len(c.taken) + 64
	for p, ok := c.first(); ok && steps > 0; p, ok = c.after(p) {
		if skip := c.excludedFrom(p); skip.IsValid() {
			p, ok = c.blockOf(ippool.LastAddr(skip))
			continue
		}
		steps--
		if c.fits(node, p) {
			c.take(p, node)
			return true
		}
	}
	return false
}

// fits reports whether p is free and node's blocks with p still make a
// valid node-local pool (the gateway outside its range, few enough gaps).
func (c *carving) fits(node string, p netip.Prefix) bool {
	if !c.free(p) {
		return false
	}
	if len(c.byNode[node]) == 0 {
		return true
	}
	_, err := NodeIPPool(c.pool, append(slices.Clone(c.byNode[node]), p))
	return err == nil
}

// excludedFrom returns the excluded prefix that covers block p whole, or
// the zero prefix: the search jumps over it at once (an IPv6 exclude can
// cover more blocks than can be walked).
func (c *carving) excludedFrom(p netip.Prefix) netip.Prefix {
	for _, e := range c.pool.Exclude {
		x, err := netip.ParsePrefix(e)
		if err != nil || x.Bits() > c.bits {
			continue
		}
		if x.Masked().Contains(p.Addr()) {
			return x.Masked()
		}
	}
	return netip.Prefix{}
}

func (c *carving) first() (netip.Prefix, bool) {
	return netip.PrefixFrom(c.subnet.Addr(), c.bits), true
}

// blockOf is the block holding a.
func (c *carving) blockOf(a netip.Addr) (netip.Prefix, bool) {
	p, err := a.Prefix(c.bits)
	return p, err == nil && c.subnet.Contains(a)
}

// after is the block after p, false past the subnet's end.
func (c *carving) after(p netip.Prefix) (netip.Prefix, bool) {
	next := ippool.LastAddr(p).Next()
	if !next.IsValid() || !c.subnet.Contains(next) {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(next, c.bits), true
}

// status is the pool's status: the blocks in address order.
func (c *carving) status() v1alpha1.AddressPoolStatus {
	st := v1alpha1.AddressPoolStatus{Name: c.pool.Name, Subnet: c.pool.Subnet, BlockPrefixLength: c.pool.BlockPrefixLength}
	for _, p := range slices.SortedFunc(func(yield func(netip.Prefix) bool) {
		for p := range c.taken {
			if !yield(p) {
				return
			}
		}
	}, comparePrefix) {
		n := c.taken[p]
		st.Blocks = append(st.Blocks, v1alpha1.AddressBlock{CIDR: p.String(), Node: n, Retained: c.retained[n]})
	}
	return st
}

func comparePrefix(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) }

// NodeIPPool is the node-local pool a node's blocks of pool make: pool's
// subnet, gateway, routes and exclusions, the range from the first block
// to the last (within the subnet's host addresses), the gaps between the
// blocks excluded. It fails when the pool would hand out nothing, or
// holds the gateway (see ippool.Parse).
func NodeIPPool(pool *v1alpha1.AddressPool, blocks []netip.Prefix) (v1alpha1.IPPool, error) {
	if len(blocks) == 0 {
		return v1alpha1.IPPool{}, fmt.Errorf("address pool %q: no block", pool.Name)
	}
	blocks = slices.SortedFunc(slices.Values(blocks), comparePrefix)
	sub := netip.MustParsePrefix(pool.Subnet)
	lo, hi := ippool.HostBounds(sub)
	start, end := blocks[0].Addr(), ippool.LastAddr(blocks[len(blocks)-1])
	if start.Less(lo) {
		start = lo
	}
	if hi.Less(end) {
		end = hi
	}
	out := v1alpha1.IPPool{Name: pool.Name, Subnet: pool.Subnet, RangeStart: start.String(), RangeEnd: end.String(),
		Gateway: pool.Gateway, Routes: slices.Clone(pool.Routes), Exclude: slices.Clone(pool.Exclude)}
	for i := 1; i < len(blocks); i++ {
		gapStart, gapEnd := ippool.LastAddr(blocks[i-1]).Next(), blocks[i].Addr().Prev()
		if gapStart.Compare(gapEnd) <= 0 {
			for _, g := range rangePrefixes(gapStart, gapEnd) {
				out.Exclude = append(out.Exclude, g.String())
			}
		}
	}
	if len(out.Exclude) > ippool.MaxExclude {
		return v1alpha1.IPPool{}, fmt.Errorf("address pool %q: the gaps between %d blocks need %d exclusions, more than %d", pool.Name, len(blocks), len(out.Exclude), ippool.MaxExclude)
	}
	if out.Gateway != "" {
		if gw, err := netip.ParseAddr(out.Gateway); err == nil && start.Compare(gw) <= 0 && gw.Compare(end) <= 0 {
			return v1alpha1.IPPool{}, fmt.Errorf("address pool %q: the range %s-%s holds the gateway %s", pool.Name, start, end, gw)
		}
	}
	if _, err := ippool.Parse(v1alpha1.IPPoolSpecs([]v1alpha1.IPPool{out})[0]); err != nil {
		return v1alpha1.IPPool{}, fmt.Errorf("address pool %q: %w", pool.Name, err)
	}
	return out, nil
}

// rangePrefixes is the shortest list of prefixes covering lo..hi exactly.
func rangePrefixes(lo, hi netip.Addr) []netip.Prefix {
	var out []netip.Prefix
	for lo.IsValid() && lo.Compare(hi) <= 0 {
		bits := lo.BitLen()
		for bits > 0 {
			p := netip.PrefixFrom(lo, bits-1)
			if p.Masked().Addr() != lo || hi.Less(ippool.LastAddr(p)) {
				break
			}
			bits--
		}
		p := netip.PrefixFrom(lo, bits)
		out = append(out, p)
		lo = ippool.LastAddr(p).Next()
	}
	return out
}
