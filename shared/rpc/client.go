package rpc

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
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

// CheckActive is CheckHealth of the server as a whole, which must also be
// the process's own server and not a stand-in for it (NewStandIn): nil
// once the process behind socketPath has taken its turn and serves.
func CheckActive(ctx context.Context, socketPath string) error {
	cc, err := Dial(socketPath)
	if err != nil {
		return err
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(false))
	if err != nil {
		return fmt.Errorf("health check %s: %w", socketPath, err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health check %s: %s", socketPath, st)
	}
	resp, err = hc.Check(ctx, &healthpb.HealthCheckRequest{Service: StandInService}, grpc.WaitForReady(false))
	if status.Code(err) == codes.NotFound {
		return nil
	}
	if err != nil {
		return fmt.Errorf("health check %s: %w", socketPath, err)
	}
	return fmt.Errorf("%s is served by a stand-in: its process waits for its turn (%s)", socketPath, resp.GetStatus())
}

// RetryUnavailable returns a dial option under which grpc itself tries a
// call of one of methods (full method names, "/package.Service/Method")
// again when it fails with Unavailable: the server went away during the
// call (it restarts), or said it cannot serve yet. Up to 5 attempts in
// all, the most grpc's retry policy allows, 10ms apart doubling to 200ms;
// under Dial's WaitForReady each attempt also waits for the server to come
// back, bounded by the call's context. Only idempotent methods belong in
// methods: a retried call may have taken effect before it failed.
func RetryUnavailable(methods ...string) grpc.DialOption {
	type name struct {
		Service string `json:"service"`
		Method  string `json:"method"`
	}
	type retryPolicy struct {
		MaxAttempts          int      `json:"maxAttempts"`
		InitialBackoff       string   `json:"initialBackoff"`
		MaxBackoff           string   `json:"maxBackoff"`
		BackoffMultiplier    float64  `json:"backoffMultiplier"`
		RetryableStatusCodes []string `json:"retryableStatusCodes"`
	}
	type methodConfig struct {
		Name        []name      `json:"name"`
		RetryPolicy retryPolicy `json:"retryPolicy"`
	}
	mc := methodConfig{RetryPolicy: retryPolicy{MaxAttempts: 5, InitialBackoff: "0.01s", MaxBackoff: "0.2s",
		BackoffMultiplier: 2, RetryableStatusCodes: []string{"UNAVAILABLE"}}}
	for _, m := range methods {
		service, method, _ := strings.Cut(strings.TrimPrefix(m, "/"), "/")
		mc.Name = append(mc.Name, name{Service: service, Method: method})
	}
	config, err := json.Marshal(map[string][]methodConfig{"methodConfig": {mc}})
	if err != nil {
		panic(err) // plain structs of strings and numbers always marshal
	}
	return grpc.WithDefaultServiceConfig(string(config))
}
