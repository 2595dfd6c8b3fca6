package store

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/managername"
)

// Collector is a prometheus.Collector reading the store at each scrape:
// the devices in the inventory by manager and link state, the allocations
// by phase, and each address pool's size, used and free addresses. It
// holds nothing of its own, so it cannot drift from the store.
type Collector struct {
	s                            *Store
	devices, allocs              *prometheus.Desc
	poolSize, poolUsed, poolFree *prometheus.Desc
	poolOutOfRange, poolRetired  *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns the collector of s.
func NewCollector(s *Store) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("netdra", "state", name), help, labels, nil)
	}
	return &Collector{s: s,
		devices:        d("devices", "Devices in the node's inventory, by manager and link state (link_state down: the device is tainted unhealthy where its pool taints).", "manager", "link_state"),
		allocs:         d("allocations", "Device allocations, by phase (preparing, prepared, attached, freeing_failed).", "phase"),
		poolSize:       d("ip_pool_size", "Addresses an address pool hands out (its range, less exclusions).", "pool"),
		poolUsed:       d("ip_pool_used", "Addresses of an address pool that allocations hold, static ones included.", "pool"),
		poolFree:       d("ip_pool_free", "Addresses an address pool can still hand out (0 for a retired pool).", "pool"),
		poolOutOfRange: d("ip_pool_out_of_range", "Addresses allocations hold in a pool's subnet but outside its range (the pool shrank).", "pool"),
		poolRetired:    d("ip_pool_retired", "1 for a pool removed from the configuration that still has addresses in use.", "pool"),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.devices, c.allocs, c.poolSize, c.poolUsed, c.poolFree, c.poolOutOfRange, c.poolRetired} {
		ch <- d
	}
}

// phaseNames are the label values of the allocation phases, each always
// reported (0 when none is in it).
var phaseNames = map[statev1.Phase]string{
	statev1.Phase_PHASE_PREPARING:      "preparing",
	statev1.Phase_PHASE_PREPARED:       "prepared",
	statev1.Phase_PHASE_ATTACHED:       "attached",
	statev1.Phase_PHASE_FREEING_FAILED: "freeing_failed",
}

var linkStateNames = map[devicev1.LinkState]string{
	devicev1.LinkState_LINK_STATE_UNSPECIFIED: "unknown",
	devicev1.LinkState_LINK_STATE_UP:          "up",
	devicev1.LinkState_LINK_STATE_DOWN:        "down",
	devicev1.LinkState_LINK_STATE_ADMIN_DOWN:  "admin_down",
}

// Collect implements prometheus.Collector. A closed store reports nothing.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	txn := s.db.ReadTxn()
	type devKey struct{ manager, link string }
	devices := map[devKey]int{}
	for r := range s.devices.All(txn) {
		devices[devKey{managername.Of(r.GetManager()), linkStateNames[r.GetLinkState()]}]++
	}
	phases := map[string]int{}
	for _, n := range phaseNames {
		phases[n] = 0
	}
	for r := range s.allocs.All(txn) {
		if n, ok := phaseNames[r.GetPhase()]; ok {
			phases[n]++
		}
	}
	pools := s.poolStatusLocked(s.leasesLocked(txn, s.pools))
	s.mu.Unlock()

	for k, n := range devices {
		ch <- prometheus.MustNewConstMetric(c.devices, prometheus.GaugeValue, float64(n), k.manager, k.link)
	}
	for p, n := range phases {
		ch <- prometheus.MustNewConstMetric(c.allocs, prometheus.GaugeValue, float64(n), p)
	}
	for _, p := range pools {
		name := p.GetPool().GetName()
		retired := 0.0
		if p.GetRetired() {
			retired = 1
		}
		ch <- prometheus.MustNewConstMetric(c.poolSize, prometheus.GaugeValue, bigFloat(p.GetSize()), name)
		ch <- prometheus.MustNewConstMetric(c.poolUsed, prometheus.GaugeValue, float64(p.GetUsed()), name)
		ch <- prometheus.MustNewConstMetric(c.poolFree, prometheus.GaugeValue, bigFloat(p.GetFree()), name)
		ch <- prometheus.MustNewConstMetric(c.poolOutOfRange, prometheus.GaugeValue, float64(p.GetOutOfRange()), name)
		ch <- prometheus.MustNewConstMetric(c.poolRetired, prometheus.GaugeValue, retired, name)
	}
}

// bigFloat is the decimal integer s (an IPv6 pool's size can pass 2^64)
// as a float64, rounded; 0 if it does not parse.
func bigFloat(s string) float64 {
	f, ok := new(big.Float).SetString(s)
	if !ok {
		return 0
	}
	v, _ := f.Float64()
	return v
}
