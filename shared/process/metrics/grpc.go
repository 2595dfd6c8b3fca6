package metrics

import (
	"context"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	"github.com/netdra/netdra/shared/rpc"
)

// GRPC times a gRPC server's calls: netdra_grpc_server_handled_total
// counts every call (unary or stream) by service, method and status code
// when it ends; netdra_grpc_server_handling_seconds is the latency of
// unary calls by service and method (a stream's duration is how long its
// client watched, not a latency, so streams are only counted).
type GRPC struct {
	handled  *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	inflight *prometheus.GaugeVec
}

// NewGRPC registers the call metrics with reg.
func NewGRPC(reg prometheus.Registerer) *GRPC {
	g := &GRPC{
		handled: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "netdra", Subsystem: "grpc_server", Name: "handled_total",
			Help: "gRPC calls served, by service, method and status code, counted when they end."}, []string{"service", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "netdra", Subsystem: "grpc_server", Name: "handling_seconds",
			Help:    "Latency of unary gRPC calls, by service and method.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}, []string{"service", "method"}),
		inflight: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "netdra", Subsystem: "grpc_server", Name: "streams_open",
			Help: "Streaming gRPC calls open now, by service and method."}, []string{"service", "method"}),
	}
	reg.MustRegister(g.handled, g.latency, g.inflight)
	return g
}

// splitMethod splits /pkg.Service/Method.
func splitMethod(full string) (service, method string) {
	full = strings.TrimPrefix(full, "/")
	if i := strings.LastIndexByte(full, '/'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "unknown", full
}

// Unary is the interceptor of unary calls.
func (g *GRPC) Unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	start := time.Now()
	resp, err := handler(ctx, req)
	svc, m := splitMethod(info.FullMethod)
	g.latency.WithLabelValues(svc, m).Observe(time.Since(start).Seconds())
	g.handled.WithLabelValues(svc, m, status.Code(err).String()).Inc()
	return resp, err
}

// Stream is the interceptor of streaming calls.
func (g *GRPC) Stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	svc, m := splitMethod(info.FullMethod)
	open := g.inflight.WithLabelValues(svc, m)
	open.Inc()
	err := handler(srv, ss)
	open.Dec()
	g.handled.WithLabelValues(svc, m, status.Code(err).String()).Inc()
	return err
}

// Server returns c with g's interceptors.
func (g *GRPC) Server(c rpc.ServerConfig) rpc.ServerConfig {
	c.Unary, c.Stream = g.Unary, g.Stream
	return c
}
