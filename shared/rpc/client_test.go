package rpc

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
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

// flakyService answers Flaky and Steady with Unavailable for the first
// fails calls of each, counting the calls.
type flakyService struct {
	mu           sync.Mutex
	fails, calls map[string]int
}

const flakyServiceName = "netdra.rpctest.Flaky"

func (s *flakyService) register(g *grpc.Server) {
	method := func(name string) grpc.MethodDesc {
		return grpc.MethodDesc{
			MethodName: name,
			Handler: func(_ any, _ context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				if err := dec(new(emptypb.Empty)); err != nil {
					return nil, err
				}
				s.mu.Lock()
				defer s.mu.Unlock()
				s.calls[name]++
				if s.calls[name] <= s.fails[name] {
					return nil, status.Error(codes.Unavailable, "not yet")
				}
				return &emptypb.Empty{}, nil
			},
		}
	}
	g.RegisterService(&grpc.ServiceDesc{ServiceName: flakyServiceName, HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{method("Flaky"), method("Steady")}}, s)
}

// TestRetryUnavailable: grpc tries a listed method again while it fails
// with Unavailable, up to 5 attempts; a method not listed fails at once.
func TestRetryUnavailable(t *testing.T) {
	tests := []struct {
		name, method string
		fails        int
		wantCalls    int
		wantCode     codes.Code
	}{
		{name: "listed, back after two failures", method: "Flaky", fails: 2, wantCalls: 3, wantCode: codes.OK},
		{name: "listed, never back", method: "Flaky", fails: 100, wantCalls: 5, wantCode: codes.Unavailable},
		{name: "not listed", method: "Steady", fails: 2, wantCalls: 1, wantCode: codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := socketPath(t)
			svc := &flakyService{fails: map[string]int{tt.method: tt.fails}, calls: map[string]int{}}
			startServer(t, ServerConfig{SocketPath: path}, svc.register)
			cc, err := Dial(path, RetryUnavailable("/"+flakyServiceName+"/Flaky"))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			err = cc.Invoke(testCtx(t), "/"+flakyServiceName+"/"+tt.method, &emptypb.Empty{}, &emptypb.Empty{})
			if got := status.Code(err); got != tt.wantCode {
				t.Errorf("call ended with %v (%v), want %v", got, err, tt.wantCode)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			if got := svc.calls[tt.method]; got != tt.wantCalls {
				t.Errorf("the server saw %d calls, want %d", got, tt.wantCalls)
			}
		})
	}
}

// TestRetryUnavailable_ServerRestartsDuringCall: the server dies during a
// listed call; the call is made again to the restarted server and
// succeeds.
func TestRetryUnavailable_ServerRestartsDuringCall(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	// The call in flight is cut at once, as when the server is killed.
	first := startServer(t, ServerConfig{SocketPath: path, StopTimeout: time.Nanosecond}, svc.register)
	cc, err := Dial(path, RetryUnavailable("/"+testServiceName+"/Slow"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	callErr := make(chan error, 1)
	go func() { callErr <- call(testCtx(t), cc, "Slow") }()
	<-svc.started
	first.Stop()
	_ = first.waitServe(t)
	second := newTestService()
	close(second.release)
	startServer(t, ServerConfig{SocketPath: path}, second.register)
	if err := <-callErr; err != nil {
		t.Fatalf("call cut by the server's restart: %v", err)
	}
}
