// Package drametrics is dra's Prometheus metrics: the kubelet's prepare and
// unprepare calls counted and timed, the devices published and tainted
// per pool, the last publication's time, the devices found lost. A nil
// *Metrics counts nothing.
package drametrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"github.com/netdra/netdra/services/dra/publish"
)

// Metrics are dra's Prometheus metrics.
type Metrics struct {
	calls       *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	devices     *prometheus.GaugeVec
	tainted     *prometheus.GaugeVec
	lastPublish prometheus.Gauge
	lost        prometheus.Counter
}

// New registers dra's metrics with reg; it panics when they are
// registered there already.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "netdra", Subsystem: "dra", Name: "claims_total",
			Help: "Claims prepared and unprepared, by operation and result."}, []string{"op", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "netdra", Subsystem: "dra", Name: "call_duration_seconds",
			Help: "Prepare and unprepare call latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12)}, []string{"op"}),
		devices: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "netdra", Subsystem: "dra", Name: "published_devices",
			Help: "Devices published, by pool."}, []string{"pool"}),
		tainted: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "netdra", Subsystem: "dra", Name: "tainted_devices",
			Help: "Devices published with the unhealthy taint (their link is down), by pool."}, []string{"pool"}),
		lastPublish: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "netdra", Subsystem: "dra", Name: "last_publish_timestamp_seconds",
			Help: "When ResourceSlices were last published."}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "netdra", Subsystem: "dra", Name: "devices_lost_total",
			Help: "Devices the provisioner found lost at unprepare (Free): a link destroyed with a pod netns the runtime tore down while netdra held no handle on it."}),
	}
	// Every op and result is exported from the start, at 0: a counter
	// whose first sample is already 1 shows no increase, and an alert on
	// the first failed prepare would never fire.
	for _, op := range []string{"prepare", "unprepare"} {
		for _, result := range []string{"ok", "error"} {
			m.calls.WithLabelValues(op, result)
		}
	}
	reg.MustRegister(m.calls, m.latency, m.devices, m.tainted, m.lastPublish, m.lost)
	return m
}

func (m *Metrics) observe(op string, start time.Time, failed int, total int) {
	m.latency.WithLabelValues(op).Observe(time.Since(start).Seconds())
	m.calls.WithLabelValues(op, "ok").Add(float64(total - failed))
	m.calls.WithLabelValues(op, "error").Add(float64(failed))
}

// DeviceLost counts a device found lost; nothing without metrics.
func (m *Metrics) DeviceLost() {
	if m != nil {
		m.lost.Inc()
	}
}

// Published sets the devices published and tainted per pool to ps's (a
// pool not in ps is dropped), and the last publication's time to now.
func (m *Metrics) Published(ps []publish.Pool) {
	if m == nil {
		return
	}
	m.devices.Reset()
	m.tainted.Reset()
	for _, p := range ps {
		m.devices.WithLabelValues(p.Name).Set(float64(len(p.Devices)))
		tainted := 0
		for _, d := range p.Devices {
			if len(publish.Taints(p.TaintEffect, d)) > 0 {
				tainted++
			}
		}
		m.tainted.WithLabelValues(p.Name).Set(float64(tainted))
	}
	m.lastPublish.SetToCurrentTime()
}

// Wrap returns p with its prepare and unprepare calls counted (per claim
// and result) and timed; p itself without metrics.
func (m *Metrics) Wrap(p kubeletplugin.DRAPlugin) kubeletplugin.DRAPlugin {
	if m == nil {
		return p
	}
	return &measured{DRAPlugin: p, m: m}
}

type measured struct {
	kubeletplugin.DRAPlugin
	m *Metrics
}

func (d *measured) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	start := time.Now()
	res, err := d.DRAPlugin.PrepareResourceClaims(ctx, claims)
	failed := 0
	for _, r := range res {
		if r.Err != nil {
			failed++
		}
	}
	if err != nil {
		failed = len(claims)
	}
	d.m.observe("prepare", start, failed, len(claims))
	return res, err
}

func (d *measured) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	start := time.Now()
	res, err := d.DRAPlugin.UnprepareResourceClaims(ctx, claims)
	failed := 0
	for _, e := range res {
		if e != nil {
			failed++
		}
	}
	if err != nil {
		failed = len(claims)
	}
	d.m.observe("unprepare", start, failed, len(claims))
	return res, err
}
