package process

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// ServeMetrics is an actor serving reg on http://addr/metrics until the
// group stops. An empty addr serves nothing. Bind it to localhost: metrics
// are for the node's own scraper.
func ServeMetrics(addr string, reg *prometheus.Registry) (Actor, error) {
	if addr == "" {
		return OnStop(func() {}), nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return Actor{}, fmt.Errorf("metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return Actor{
		Execute: func() error {
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics server: %w", err)
			}
			return nil
		},
		Interrupt: func(error) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		},
	}, nil
}
