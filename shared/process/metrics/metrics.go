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
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
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
//
// An address another process still holds (EADDRINUSE: the previous
// instance's, while it exits in a roll) is not fatal: the actor binds it
// as soon as it is free, and logs on log that it waits, again every
// little while, so that a port held for good shows in the logs without
// stopping the process's work.
func Serve(addr string, reg *prometheus.Registry, log *slog.Logger) (process.Actor, error) {
	if addr == "" {
		return process.OnStop(func() {}), nil
	}
	l, err := net.Listen("tcp", bracketed(addr))
	if err != nil && !errors.Is(err, syscall.EADDRINUSE) {
		return process.Actor{}, fmt.Errorf("metrics listener: %w", err)
	}
	srv := &http.Server{Handler: Handler(reg), ReadHeaderTimeout: 5 * time.Second}
	stop := make(chan struct{})
	var once sync.Once
	return process.Actor{
		Execute: func() error {
			if l == nil {
				if l = listenWhenFree(addr, log, stop); l == nil {
					return nil
				}
			}
			if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("metrics server: %w", err)
			}
			return nil
		},
		Interrupt: func(error) {
			once.Do(func() { close(stop) })
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(ctx)
		},
	}, nil
}

// listenWhenFree listens on addr once no other socket holds it, trying
// again every busyRetry, until stop closes (nil).
func listenWhenFree(addr string, log *slog.Logger, stop <-chan struct{}) net.Listener {
	t := time.NewTicker(busyRetry)
	defer t.Stop()
	start, said := time.Now(), time.Time{}
	for {
		l, err := net.Listen("tcp", bracketed(addr))
		if err == nil {
			if !said.IsZero() {
				log.Info("Metrics address free again, serving", "address", addr, "waited", time.Since(start).Round(time.Millisecond))
			}
			return l
		}
		if time.Since(said) >= busyLog {
			log.Warn("Metrics not served yet: the address is in use", "address", addr, "error", err)
			said = time.Now()
		}
		select {
		case <-stop:
			return nil
		case <-t.C:
		}
	}
}

// busyRetry is how often a metrics address in use is tried again, and
// busyLog how often the wait is logged again.
const (
	busyRetry = 100 * time.Millisecond
	busyLog   = 30 * time.Second
)

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
