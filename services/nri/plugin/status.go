package plugin

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
)

// metrics are the hooks' counts and latencies.
type metrics struct {
	hooks   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	lost    prometheus.Counter
	work    *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		hooks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "netdra", Subsystem: "nri", Name: "hooks_total",
			Help: "NRI hook calls by hook and result (ok, error).",
		}, []string{"hook", "result"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "netdra", Subsystem: "nri", Name: "hook_duration_seconds",
			Help:    "NRI hook latency by hook.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2},
		}, []string{"hook"}),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "netdra", Subsystem: "nri", Name: "background_duration_seconds",
			Help:    "Background attach and detach of a pod's devices, started by RunPodSandbox and StopPodSandbox, by work and result (ok, error).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"work", "result"}),
		lost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "netdra", Subsystem: "nri", Name: "devices_lost_total",
			Help: "Devices found lost at Detach: the pod's netns was gone and the device's link with it (a veth destroyed with its namespace).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.hooks, m.latency, m.lost, m.work)
	}
	return m
}

// observe records one hook call that started at start.
func (m *metrics) observe(hook string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.hooks.WithLabelValues(hook, result).Inc()
	m.latency.WithLabelValues(hook).Observe(time.Since(start).Seconds())
}

// background records one background attach or detach that started at
// start.
func (m *metrics) background(work string, start time.Time, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.work.WithLabelValues(work, result).Observe(time.Since(start).Seconds())
}

// conn tracks the connection to the runtime.
type conn struct {
	socket      atomic.Value // string
	connected   atomic.Bool
	connections atomic.Uint32

	mu    sync.Mutex
	ready chan struct{} // closed while connected; replaced when it drops
}

// setConnected records whether the plugin is synchronized with the
// runtime, and wakes the callers of readyChan when it becomes so.
func (c *conn) setConnected(up bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.connected.Store(up)
	ch := c.readyLocked()
	select {
	case <-ch:
		if !up {
			c.ready = make(chan struct{})
		}
	default:
		if up {
			close(ch)
		}
	}
}

// readyChan returns a channel closed once the plugin is synchronized with
// the runtime (already closed when it is now).
func (c *conn) readyChan() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.readyLocked()
}

func (c *conn) readyLocked() chan struct{} {
	if c.ready == nil {
		c.ready = make(chan struct{})
	}
	return c.ready
}

// collectors read c at each scrape: netdra_nri_runtime_connected is 1
// while the plugin is synchronized with the runtime (between Synchronize
// and the connection's close), netdra_nri_runtime_connections_total counts
// the synchronizations since the process started.
func (c *conn) collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "netdra", Subsystem: "nri", Name: "runtime_connected",
			Help: "1 while the plugin is connected to the container runtime and synchronized with it, else 0: pods started meanwhile run without their devices until it reconnects."},
			func() float64 {
				if c.connected.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "netdra", Subsystem: "nri", Name: "runtime_connections_total",
			Help: "Connections to the container runtime that reached Synchronize."},
			func() float64 { return float64(c.connections.Load()) }),
	}
}

// Service is the plugin's NriService, its admin API (Status), served on
// the plugin's socket.
type Service struct {
	nriv1.UnimplementedNriServiceServer
	p *Plugin
}

var _ nriv1.NriServiceServer = Service{}

// SetWaiting gives Status what says which peers the plugin cannot reach
// and why (process.Peers.Watch).
func (p *Plugin) SetWaiting(f func() []string) { p.waiting.Store(&f) }

// Service returns p's NriService.
func (p *Plugin) Service() Service { return Service{p: p} }

// Status implements NriServiceServer.
func (s Service) Status(context.Context, *nriv1.StatusRequest) (*nriv1.StatusResponse, error) {
	p := s.p
	out := &nriv1.StatusResponse{Connected: p.conn.connected.Load(), Connections: p.conn.connections.Load()}
	out.RuntimeSocket, _ = p.conn.socket.Load().(string)
	if w := p.waiting.Load(); w != nil {
		out.WaitingFor = (*w)()
	}
	if !out.Connected {
		out.WaitingFor = append(out.WaitingFor, "the container runtime's NRI socket "+cmp.Or(out.RuntimeSocket, "(not dialled yet)"))
	}
	p.mu.Lock()
	pods := map[string]*nriv1.Pod{}
	for uid, ns := range p.netns {
		pods[uid] = &nriv1.Pod{Uid: uid, NetnsPath: ns, Attach: p.attaching[uid].state()}
	}
	for uid, w := range p.detaching {
		if pods[uid] == nil {
			pods[uid] = &nriv1.Pod{Uid: uid, NetnsPath: w.netns}
		}
		pods[uid].Detach = w.state()
	}
	p.mu.Unlock()
	for _, pod := range pods {
		out.Pods = append(out.Pods, pod)
	}
	slices.SortFunc(out.Pods, func(a, b *nriv1.Pod) int { return strings.Compare(a.GetUid(), b.GetUid()) })
	return out, nil
}
