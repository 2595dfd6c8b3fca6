package rpc

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

func TestServerHealthAndReflection(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	startServer(t, ServerConfig{SocketPath: path}, svc.register)
	cc := dial(t, path)
	ctx := testCtx(t)

	resp, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("health check: %v", err)
	}
	if got := resp.GetStatus(); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("health status %v, want SERVING", got)
	}

	stream, err := reflectionpb.NewServerReflectionClient(cc).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	req := &reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}
	if err := stream.Send(req); err != nil {
		t.Fatal(err)
	}
	rresp, err := stream.Recv()
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	stream.CloseSend()
	var got []string
	for _, s := range rresp.GetListServicesResponse().GetService() {
		got = append(got, s.GetName())
	}
	slices.Sort(got)
	want := []string{
		"grpc.health.v1.Health",
		"grpc.reflection.v1.ServerReflection",
		"grpc.reflection.v1alpha.ServerReflection",
		testServiceName,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("reflected services (-want +got):\n%s", diff)
	}
}

func TestCheckHealth(t *testing.T) {
	path := socketPath(t)
	srv := startServer(t, ServerConfig{SocketPath: path})
	srv.SetServing("netdra.Up", true)
	srv.SetServing("netdra.Down", false)

	tests := []struct {
		service  string
		wantErr  string // substring; empty means healthy
		wantCode codes.Code
	}{
		{service: ""},
		{service: "netdra.Up"},
		{service: "netdra.Down", wantErr: "is NOT_SERVING"},
		{service: "netdra.Unknown", wantErr: "health check", wantCode: codes.NotFound},
	}
	for _, tt := range tests {
		t.Run("service="+tt.service, func(t *testing.T) {
			err := CheckHealth(testCtx(t), path, tt.service)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckHealth: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckHealth error %v, want it to contain %q", err, tt.wantErr)
			}
			if tt.wantCode != codes.OK && status.Code(err) != tt.wantCode {
				t.Errorf("code %v, want %v", status.Code(err), tt.wantCode)
			}
		})
	}

	t.Run("no server", func(t *testing.T) {
		// Fails fast despite Dial's WaitForReady default: the context would
		// otherwise expire and the code would be DeadlineExceeded.
		err := CheckHealth(testCtx(t), socketPath(t), "")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("CheckHealth with no server: %v, want code Unavailable", err)
		}
	})
}

func TestPeerCredentials(t *testing.T) {
	self := uint32(os.Getuid())
	tests := []struct {
		name     string
		allowed  []uint32
		wantCode codes.Code
	}{
		{name: "default list admits own uid", wantCode: codes.OK},
		{name: "explicit own uid", allowed: []uint32{4242424, self}, wantCode: codes.OK},
		{name: "own uid not listed", allowed: []uint32{4242424}, wantCode: codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := socketPath(t)
			svc := newTestService()
			startServer(t, ServerConfig{SocketPath: path, AllowedUIDs: tt.allowed}, svc.register)
			cc := dial(t, path)
			ctx := testCtx(t)

			_, herr := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
			perr := call(ctx, cc, "Ping")
			for what, err := range map[string]error{"health": herr, "ping": perr} {
				if got := status.Code(err); got != tt.wantCode {
					t.Fatalf("%s: code %v (%v), want %v", what, got, err, tt.wantCode)
				}
			}
			if tt.wantCode != codes.OK {
				want := fmt.Sprintf("peer uid %d is not allowed on %s", self, path)
				if diff := cmp.Diff(want, status.Convert(herr).Message()); diff != "" {
					t.Errorf("denial message (-want +got):\n%s", diff)
				}
				return
			}
			svc.mu.Lock()
			got := svc.peer
			svc.mu.Unlock()
			want := PeerCred{PID: int32(os.Getpid()), UID: self, GID: uint32(os.Getgid())}
			if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool {
				return p.Last().String() == ".CommonAuthInfo"
			}, cmp.Ignore())); diff != "" {
				t.Errorf("PeerCredFromContext (-want +got):\n%s", diff)
			}
		})
	}
}

const helperSocketEnv = "NETDRA_RPC_TEST_HELPER_SOCKET"

func TestPanicRecovery(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	startServer(t, ServerConfig{SocketPath: path}, svc.register)
	cc := dial(t, path)
	ctx := testCtx(t)

	tests := []struct {
		name string
		call func() error
	}{
		{"unary", func() error { return call(ctx, cc, "Panic") }},
		{"stream", func() error {
			_, err := openStream(ctx, cc, "PanicStream")
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if got := status.Code(err); got != codes.Internal {
				t.Fatalf("code %v (%v), want Internal", got, err)
			}
			if !strings.Contains(err.Error(), "boom") {
				t.Errorf("error %q does not carry the panic value", err)
			}
			if err := call(ctx, cc, "Ping"); err != nil {
				t.Fatalf("server stopped serving after a panic: %v", err)
			}
		})
	}
}

func TestStopFinishesInFlightCall(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	srv := startServer(t, ServerConfig{SocketPath: path, StopTimeout: time.Minute}, svc.register)
	cc := dial(t, path)

	callErr := make(chan error, 1)
	go func() { callErr <- call(testCtx(t), cc, "Slow") }()
	<-svc.started

	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()
	// Stop has begun once the listener is closed and the socket unlinked.
	eventually(t, "socket removed", func() error { return isNotExist(path) })
	select {
	case <-stopped:
		t.Fatal("Stop returned with a call in flight")
	default:
	}

	close(svc.release)
	if err := <-callErr; err != nil {
		t.Fatalf("in-flight call: %v", err)
	}
	<-stopped
	if err := srv.waitServe(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestStopCancelsStreamsAfterTimeout(t *testing.T) {
	path := socketPath(t)
	svc := newTestService()
	srv := startServer(t, ServerConfig{SocketPath: path, StopTimeout: 100 * time.Millisecond}, svc.register)
	cc := dial(t, path)
	ctx := testCtx(t)

	watch, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health watch: %v, %v; want SERVING", resp, err)
	}
	stream, err := openStream(ctx, cc, "Watch")
	if err != nil {
		t.Fatal(err)
	}

	stopped := make(chan struct{})
	go func() {
		srv.Stop()
		close(stopped)
	}()

	// Health turns NOT_SERVING first, then the streams are cut.
	if resp, err := watch.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health watch during Stop: %v, %v; want NOT_SERVING", resp, err)
	}
	if _, err := watch.Recv(); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("health watch after Stop: %v, want a broken stream", err)
	}
	if err := stream.RecvMsg(new(emptypb.Empty)); err == nil || errors.Is(err, io.EOF) {
		t.Errorf("watch stream after Stop: %v, want a broken stream", err)
	}
	<-stopped
	if err := srv.waitServe(t); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

func TestServerLifecycle(t *testing.T) {
	t.Run("stop before serve", func(t *testing.T) {
		path := socketPath(t)
		srv := NewServer(ServerConfig{SocketPath: path, Logger: testLogger(t)})
		srv.Stop()
		srv.Stop()
		if err := srv.Serve(); err != nil {
			t.Fatalf("Serve after Stop: %v", err)
		}
		if err := isNotExist(path); err != nil {
			t.Error(err)
		}
	})
	t.Run("stop twice", func(t *testing.T) {
		path := socketPath(t)
		srv := startServer(t, ServerConfig{SocketPath: path})
		srv.Stop()
		srv.Stop()
		if err := srv.waitServe(t); err != nil {
			t.Fatalf("Serve: %v", err)
		}
		if err := isNotExist(path); err != nil {
			t.Error(err)
		}
		if err := CheckHealth(testCtx(t), path, ""); err == nil {
			t.Error("stopped server still answers")
		}
	})
	t.Run("path taken", func(t *testing.T) {
		path := socketPath(t)
		startServer(t, ServerConfig{SocketPath: path})
		srv := NewServer(ServerConfig{SocketPath: path, Logger: testLogger(t)})
		defer srv.Stop()
		err := srv.Serve()
		if err == nil || !strings.Contains(err.Error(), "already listening") {
			t.Fatalf("Serve on a taken path: %v, want an in-use error", err)
		}
	})
}
