// Package counters exports the per-device counters of the provisioner's
// eBPF programs (packets and bytes each way, drops by policy) as Prometheus
// metrics, labelled with the pool, device, namespace and pod the device is
// allocated to. It reads them at every scrape: the provisioner's
// DeviceCounters for the numbers, the state service's allocations for the
// labels; a device with counters but no allocation (freed meanwhile) is
// left out.
package counters

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
)

// Provisioner is the part of the provisioner's API the collector reads.
type Provisioner interface {
	DeviceCounters(ctx context.Context, in *provisionerv1.DeviceCountersRequest, opts ...grpc.CallOption) (*provisionerv1.DeviceCountersResponse, error)
}

// State is the part of the state service's API the collector reads.
type State interface {
	ListAllocations(ctx context.Context, in *statev1.ListAllocationsRequest, opts ...grpc.CallOption) (*statev1.ListAllocationsResponse, error)
}

// PodNamer names the pod of a UID in a namespace; "" when it cannot.
type PodNamer interface {
	PodName(ctx context.Context, namespace, uid string) string
}

var (
	_ Provisioner = provisionerv1.NewProvisionerServiceClient(nil)
	_ State       = statev1.NewStateServiceClient(nil)
)

// Collector is a prometheus.Collector of the device counters.
type Collector struct {
	log     *slog.Logger
	prov    Provisioner
	state   State
	pods    PodNamer
	timeout time.Duration

	packets, bytes, dropPackets, dropBytes, up *prometheus.Desc

	mu sync.Mutex // one scrape at a time
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector reading prov and state; pods, when not nil, names
// the pods (the pod label is the pod's UID otherwise). A nil log discards.
func New(log *slog.Logger, prov Provisioner, state State, pods PodNamer) *Collector {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	labels := []string{"pool", "device", "namespace", "pod"}
	desc := func(name, help string, extra ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("netdra", "device", name), help, append(labels, extra...), nil)
	}
	return &Collector{
		log: log, prov: prov, state: state, pods: pods, timeout: 2 * time.Second,
		packets:     desc("packets_total", "Packets the pod received (rx) and sent (tx) on the device, as netdra's eBPF programs counted them.", "direction"),
		bytes:       desc("bytes_total", "Bytes the pod received (rx) and sent (tx) on the device.", "direction"),
		dropPackets: desc("dropped_packets_total", "Packets dropped on the device by a policy: spoofChk (egress, another source MAC) or vlan (ingress, another tag or none).", "policy"),
		dropBytes:   desc("dropped_bytes_total", "Bytes dropped on the device by a policy.", "policy"),
		up:          prometheus.NewDesc("netdra_device_counters_up", "Whether the last scrape read the device counters from the provisioner and the state service.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.packets, c.bytes, c.dropPackets, c.dropBytes, c.up} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	ok := c.collect(ctx, ch)
	v := 0.0
	if ok {
		v = 1
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, v)
}

func (c *Collector) collect(ctx context.Context, ch chan<- prometheus.Metric) bool {
	counters, err := c.prov.DeviceCounters(ctx, &provisionerv1.DeviceCountersRequest{})
	if err != nil {
		c.log.Debug("reading device counters", "error", err)
		return false
	}
	if len(counters.GetDevices()) == 0 {
		return true
	}
	allocs, err := c.state.ListAllocations(ctx, &statev1.ListAllocationsRequest{})
	if err != nil {
		c.log.Debug("listing allocations for the device counters", "error", err)
		return false
	}
	byDevice := map[string]*statev1.Allocation{}
	for _, a := range allocs.GetAllocations() {
		byDevice[a.GetDeviceName()] = a
	}
	for _, d := range counters.GetDevices() {
		a, ok := byDevice[d.GetDevice()]
		if !ok {
			continue
		}
		pod := a.GetPodUid()
		if c.pods != nil {
			if name := c.pods.PodName(ctx, a.GetClaimNamespace(), a.GetPodUid()); name != "" {
				pod = name
			}
		}
		l := []string{a.GetPool(), d.GetDevice(), a.GetClaimNamespace(), pod}
		counter := func(desc *prometheus.Desc, v uint64, extra string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), append(l, extra)...)
		}
		counter(c.packets, d.GetRxPackets(), "rx")
		counter(c.packets, d.GetTxPackets(), "tx")
		counter(c.bytes, d.GetRxBytes(), "rx")
		counter(c.bytes, d.GetTxBytes(), "tx")
		for _, drop := range d.GetDrops() {
			counter(c.dropPackets, drop.GetPackets(), drop.GetPolicy())
			counter(c.dropBytes, drop.GetBytes(), drop.GetPolicy())
		}
	}
	return true
}
