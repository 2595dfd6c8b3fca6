package rpc

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"
)

func TestDialSurvivesServerRestart(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	first := startServer(t, ServerConfig{SocketPath: path}, svc.register)
	cc := dial(t, path)
	if err := call(testCtx(t), cc, "Ping"); err != nil {
		t.Fatalf("call to first server: %v", err)
	}

	first.Stop()
	if err := first.waitServe(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	startServer(t, ServerConfig{SocketPath: path}, newTestService().register)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := call(ctx, cc, "Ping"); err != nil {
		t.Fatalf("call to restarted server on the same conn: %v", err)
	}
}

func TestDialWaitsForServer(t *testing.T) {
	path := socketPath(t)
	cc := dial(t, path)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	callErr := make(chan error, 1)
	go func() { callErr <- call(ctx, cc, "Ping") }()

	// Wait until the call has tried the missing socket, then bring the
	// server up.
	eventually(t, "connection attempt failed", func() error {
		if st := cc.GetState(); st != connectivity.TransientFailure {
			return fmt.Errorf("state %v", st)
		}
		return nil
	})
	startServer(t, ServerConfig{SocketPath: path}, newTestService().register)
	if err := <-callErr; err != nil {
		t.Fatalf("call made while the server was down: %v", err)
	}
}
