// Package metrics serves a node process's Prometheus metrics over HTTP,
// as an actor of its run group, and times its gRPC calls. It is apart
// from package process so that the binaries that serve no metrics (the
// hooks the runtime runs) do not link the Prometheus client, whose code
// and init-time collectors would add to their start time and memory.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/netdra/netdra/shared/process"
)

// NewRegistry returns a Prometheus registry with the Go runtime and process
// collectors.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Handler serves reg's metrics at /metrics, in the text or protobuf
// exposition format the scraper asks for.
func Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}

// Serve is an actor serving reg on http://addr/metrics until the group
// stops. An empty addr serves nothing. The metrics are counts, states and
// latencies, no secrets: they are served in plain HTTP, to whoever reaches
// addr (a loopback address keeps them on the node). An IPv6 host may be
// written without brackets (fd00::1:9651), as a pod's status.podIP
// substitutes into a flag: the port is after the last colon.
func Serve(addr string, reg *prometheus.Registry) (process.Actor, error) {
	if addr == "" {
		return process.OnStop(func() {}), nil
	}
	l, err := net.Listen("tcp", bracketed(addr))
	if err != nil {
		return process.Actor{}, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: Handler(reg), ReadHeaderTimeout: 5 * time.Second}
	return process.Actor{
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

// bracketed is addr with its host in brackets when it is a bare IPv6
// address followed by :port; any other addr as it is.
func bracketed(addr string) string {
	if _, _, err := net.SplitHostPort(addr); err == nil {
		return addr
	}
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return addr
	}
	if ip, err := netip.ParseAddr(addr[:i]); err == nil && ip.Is6() {
		return net.JoinHostPort(addr[:i], addr[i+1:])
	}
	return addr
}
