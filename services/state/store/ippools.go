package store

import (
	"errors"
	"fmt"
	"maps"
	"math/big"
	"net/netip"
	"slices"

	"github.com/cilium/statedb"
	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/ippool"
)

// ErrExhausted: an address pool has no free address.
var ErrExhausted = errors.New("address pool exhausted")

var poolBucket = []byte("ippools")

// ipPool is one address pool: its definition, whether it was removed from
// the configuration while addresses of it were in use, and the round-robin
// cursor (in memory: after a restart the walk starts at the range's start,
// skipping what is in use).
type ipPool struct {
	def     *statev1.IPPool
	pool    *ippool.Pool
	retired bool
	cursor  netip.Addr
}

// Which addresses are in use is not a table of its own: an address is in
// use exactly while an allocation's config holds it, so it is released with
// the allocation (unprepare, a rolled-back prepare) in the same durable
// write, and can never outlive it or be lost.

// SpecOf converts a pool definition from the API.
func SpecOf(p *statev1.IPPool) ippool.Spec {
	s := ippool.Spec{Name: p.GetName(), Subnet: p.GetSubnet(), RangeStart: p.GetRangeStart(),
		RangeEnd: p.GetRangeEnd(), Gateway: p.GetGateway(), Exclude: p.GetExclude()}
	for _, r := range p.GetRoutes() {
		s.Routes = append(s.Routes, ippool.RouteSpec{Destination: r.GetDestination(), Gateway: r.GetGateway()})
	}
	return s
}

// ValidatePools checks a set of pools (see ippool.ParseAll). Fields are
// named from "pools".
func ValidatePools(defs []*statev1.IPPool) ([]*ippool.Pool, error) {
	specs := make([]ippool.Spec, len(defs))
	for i, d := range defs {
		specs[i] = SpecOf(d)
	}
	return ippool.ParseAll("pools", specs)
}

// ReplaceIPPools replaces the address pools, durably. A pool that is gone
// but still has addresses in use is kept, retired, until they are released.
func (s *Store) ReplaceIPPools(req *statev1.ReplaceIPPoolsRequest) (*statev1.ReplaceIPPoolsResponse, error) {
	parsed, err := ValidatePools(req.GetPools())
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	next := map[string]*ipPool{}
	for i, p := range parsed {
		e := &ipPool{def: proto.CloneOf(req.GetPools()[i]), pool: p}
		if old := s.pools[p.Name]; old != nil && !old.retired {
			e.cursor = old.cursor
		}
		next[p.Name] = e
	}
	leases := s.leasesLocked(s.db.ReadTxn(), next)
	for name, old := range s.pools {
		if next[name] != nil {
			continue
		}
		// Still in use: keep it, retired, so its addresses stay reserved and
		// accounted for.
		if e := (&ipPool{def: old.def, pool: old.pool, retired: true}); len(s.leasesLocked(s.db.ReadTxn(), map[string]*ipPool{name: e})[name]) > 0 {
			next[name] = e
		}
	}
	if err := s.file.savePools(next); err != nil {
		return nil, fmt.Errorf("writing the address pools: %w", err)
	}
	s.pools = next
	leases = s.leasesLocked(s.db.ReadTxn(), next)
	return &statev1.ReplaceIPPoolsResponse{Pools: s.poolStatusLocked(leases)}, nil
}

// ListIPPools returns every pool with its use.
func (s *Store) ListIPPools() *statev1.ListIPPoolsResponse {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &statev1.ListIPPoolsResponse{Pools: s.poolStatusLocked(s.leasesLocked(s.db.ReadTxn(), s.pools))}
}

// leasesLocked maps each pool name to the leases of its addresses: the
// addresses of every allocation's config that fall in the pool's range, or
// in its subnet when the pool handed them out and then shrank.
func (s *Store) leasesLocked(txn statedb.ReadTxn, pools map[string]*ipPool) map[string][]*statev1.IPLease {
	out := map[string][]*statev1.IPLease{}
	names := slices.Sorted(maps.Keys(pools))
	for r := range s.allocs.All(txn) {
		a := r.Allocation
		pooled := map[netip.Addr]bool{}
		for _, c := range a.GetPoolAddresses() {
			if p, err := netip.ParsePrefix(c); err == nil {
				pooled[p.Addr()] = true
			}
		}
		for _, c := range a.GetConfig().GetAddresses() {
			pfx, err := netip.ParsePrefix(c)
			if err != nil {
				continue
			}
			addr := pfx.Addr()
			owner := ""
			for _, n := range names {
				if p := pools[n].pool; p.Contains(addr) || (pooled[addr] && p.Subnet.Contains(addr)) {
					owner = n
					break
				}
			}
			if owner == "" {
				continue
			}
			out[owner] = append(out[owner], &statev1.IPLease{
				Address: c, Allocation: &statev1.AllocationKey{Pool: a.GetPool(), DeviceName: a.GetDeviceName(), ShareId: a.GetShareId()},
				ClaimUid: a.GetClaimUid(), ClaimNamespace: a.GetClaimNamespace(), ClaimName: a.GetClaimName(),
				Static: !pooled[addr]})
		}
	}
	return out
}

func (s *Store) poolStatusLocked(leases map[string][]*statev1.IPLease) []*statev1.IPPoolStatus {
	var out []*statev1.IPPoolStatus
	for _, n := range slices.Sorted(maps.Keys(s.pools)) {
		e := s.pools[n]
		ls := leases[n]
		if e.retired && len(ls) == 0 {
			continue
		}
		st := &statev1.IPPoolStatus{Pool: e.def, Retired: e.retired, Leases: ls, Used: uint32(len(ls))}
		size := e.pool.Size()
		var inRange int64
		for _, l := range ls {
			if p, _ := netip.ParsePrefix(l.GetAddress()); e.pool.Usable(p.Addr()) {
				inRange++
			} else {
				st.OutOfRange++
			}
		}
		st.Size = size.String()
		free := size.Sub(size, big.NewInt(inRange))
		if e.retired || free.Sign() < 0 {
			free.SetInt64(0)
		}
		st.Free = free.String()
		out = append(out, st)
	}
	return out
}

// assignAddresses gives row an address from each pool its config names
// (ipPools) and checks its static addresses against the pools: the new
// addresses and the pools' routes are added to row's config and recorded
// in pool_addresses. row is a fresh copy the caller owns.
func (w *writer) assignAddresses(row *statev1.Allocation) error {
	if len(row.GetPoolAddresses()) > 0 {
		return fieldErr("poolAddresses", "set by the service")
	}
	cfg := row.GetConfig()
	if cfg == nil || (len(cfg.GetIpPools()) == 0 && len(w.s.pools) == 0) {
		return nil
	}
	used := w.usedAddresses()
	if err := w.checkStaticAddresses(cfg, used); err != nil {
		return err
	}
	return w.assignFromPools(row, used)
}

// usedAddresses is the allocation holding each address of the configs of
// the allocations.
func (w *writer) usedAddresses() map[netip.Addr]*statev1.Allocation {
	used := map[netip.Addr]*statev1.Allocation{}
	for r := range w.s.allocs.All(w.txn) {
		for _, c := range r.GetConfig().GetAddresses() {
			if p, err := netip.ParsePrefix(c); err == nil {
				used[p.Addr()] = r.Allocation
			}
		}
	}
	return used
}

// checkStaticAddresses refuses a static address of cfg that is a pool's
// gateway, or in a pool's range and held by another allocation (used).
func (w *writer) checkStaticAddresses(cfg *devicev1.DeviceConfig, used map[netip.Addr]*statev1.Allocation) error {
	for i, c := range cfg.GetAddresses() {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return fieldErr(fmt.Sprintf("config.addresses[%d]", i), "%q is not a CIDR", c)
		}
		for _, n := range slices.Sorted(maps.Keys(w.s.pools)) {
			pool := w.s.pools[n].pool
			if !pool.Subnet.Contains(p.Addr()) {
				continue
			}
			if p.Addr() == pool.Gateway {
				return fieldErr(fmt.Sprintf("config.addresses[%d]", i), "%s is the gateway of ip pool %q", p.Addr(), n)
			}
			if h := used[p.Addr()]; h != nil && pool.Contains(p.Addr()) {
				return fmt.Errorf("config.addresses[%d]: %s is in ip pool %q's range and held by claim %s/%s (device %s): %w",
					i, p.Addr(), n, h.GetClaimNamespace(), h.GetClaimName(), h.GetDeviceName(), ErrConflict)
			}
		}
	}
	return nil
}

// assignFromPools gives row the next free address of each pool its config
// names, at most one pool per IP family.
func (w *writer) assignFromPools(row *statev1.Allocation, used map[netip.Addr]*statev1.Allocation) error {
	var families [2]string
	for i, name := range row.GetConfig().GetIpPools() {
		f := fmt.Sprintf("config.ipPools[%d]", i)
		e := w.s.pools[name]
		switch {
		case e == nil:
			return fieldErr(f, "no ip pool %q on this node (NodeConfig spec.ipPools names %s)", name, poolNames(w.s.pools))
		case e.retired:
			return fieldErr(f, "ip pool %q was removed from the NodeConfig", name)
		}
		fam := 1
		if e.pool.Is4() {
			fam = 0
		}
		if families[fam] != "" {
			return fieldErr(f, "ip pools %q and %q are of the same IP family: name one pool per family", families[fam], name)
		}
		families[fam] = name
		if err := takeAddress(row, name, e, used); err != nil {
			return err
		}
	}
	return nil
}

// takeAddress gives row the next free address of the pool e, called name,
// with the pool's routes, and marks the address used.
func takeAddress(row *statev1.Allocation, name string, e *ipPool, used map[netip.Addr]*statev1.Allocation) error {
	addr, ok := e.pool.Next(e.cursor, func(a netip.Addr) bool { return used[a] != nil })
	if !ok {
		return fmt.Errorf("ip pool %q has no free address: all %s are in use: %w", name, e.pool.Size(), ErrExhausted)
	}
	e.cursor = addr
	used[addr] = row
	cfg := row.GetConfig()
	c := e.pool.Prefix(addr).String()
	cfg.Addresses = append(cfg.Addresses, c)
	row.PoolAddresses = append(row.PoolAddresses, c)
	for _, r := range e.pool.Routes {
		route := &devicev1.Route{Destination: r.Destination.String()}
		if r.Gateway.IsValid() {
			route.Gateway = r.Gateway.String()
		}
		cfg.Routes = append(cfg.Routes, route)
	}
	return nil
}

func poolNames(pools map[string]*ipPool) string {
	var names []string
	for n, e := range pools {
		if !e.retired {
			names = append(names, fmt.Sprintf("%q", n))
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return fmt.Sprint(names)
}

// loadPools reads the pools saved by savePools.
func (f *file) loadPools() (map[string]*ipPool, error) {
	out := map[string]*ipPool{}
	err := guard(func() error { return f.loadPoolsInto(out) })
	return out, err
}

func (f *file) loadPoolsInto(out map[string]*ipPool) error {
	return f.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(poolBucket)
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			st := &statev1.IPPoolStatus{}
			if err := proto.Unmarshal(v, st); err != nil {
				return fmt.Errorf("ip pool %q: %w", k, err)
			}
			p, err := ippool.Parse(SpecOf(st.GetPool()))
			if err != nil {
				return fmt.Errorf("ip pool %q: %w", k, err)
			}
			if p.Name != string(k) {
				return fmt.Errorf("ip pool %q: stored under another name: the pool is %q", k, p.Name)
			}
			out[p.Name] = &ipPool{def: st.GetPool(), pool: p, retired: st.GetRetired()}
			return nil
		})
	})
}

// savePools replaces the saved pools, in one fsynced transaction.
func (f *file) savePools(pools map[string]*ipPool) error {
	return f.db.Update(func(tx *bolt.Tx) error {
		if tx.Bucket(poolBucket) != nil {
			if err := tx.DeleteBucket(poolBucket); err != nil {
				return err
			}
		}
		b, err := tx.CreateBucket(poolBucket)
		if err != nil {
			return err
		}
		for n, e := range pools {
			v, err := proto.Marshal(&statev1.IPPoolStatus{Pool: e.def, Retired: e.retired})
			if err != nil {
				return err
			}
			if err := b.Put([]byte(n), v); err != nil {
				return err
			}
		}
		return nil
	})
}
