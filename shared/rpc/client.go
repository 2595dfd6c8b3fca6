package rpc

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Dial returns a client connection to the unix socket at socketPath. It does
// not connect until the first call.
//
// The connection survives server restarts: it reconnects with exponential
// backoff (50ms up to 2s), and calls default to grpc.WaitForReady(true), so a
// call made while the server is down waits for it, bounded by the call's
// context, instead of failing fast. opts are applied after these defaults
// and may override them.
func Dial(socketPath string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	dialer := func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", socketPath)
	}
	// A restarted server's socket usually comes back within milliseconds,
	// so reconnect early and cap the wait low.
	bo := backoff.Config{
		BaseDelay:  50 * time.Millisecond,
		Multiplier: 1.6,
		Jitter:     0.2,
		MaxDelay:   2 * time.Second,
	}
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(dialer),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithDefaultCallOptions(grpc.WaitForReady(true)),
	}
	// passthrough hands the target to the dialer untouched and makes the
	// :authority "localhost", as grpc's unix resolver would.
	cc, err := grpc.NewClient("passthrough:///localhost", append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", socketPath, err)
	}
	return cc, nil
}

// CheckHealth asks the grpc.health.v1 service on the unix socket at
// socketPath for the status of service ("" is the server as a whole). It
// returns nil when the status is SERVING and an error otherwise, including
// when nothing listens: it fails fast rather than wait for the server. It is
// meant for the processes' health subcommands run as exec probes; ctx should
// carry the probe's timeout.
func CheckHealth(ctx context.Context, socketPath, service string) error {
	cc, err := Dial(socketPath)
	if err != nil {
		return err
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(ctx,
		&healthpb.HealthCheckRequest{Service: service}, grpc.WaitForReady(false))
	if err != nil {
		return fmt.Errorf("health check %s: %w", socketPath, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check %s: service %q is %s", socketPath, service, st)
	}
	return nil
}
