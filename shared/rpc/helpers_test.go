package rpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

// testWriter forwards log lines to t.Log until the test's cleanup, so that
// a straggling server goroutine cannot log into a finished test.
type testWriter struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// socketPath returns a socket path in a fresh directory short enough for
// the 108-byte sun_path limit (t.TempDir can be too long).
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "rpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// eventually polls cond until it returns nil or a generous deadline passes.
func eventually(t testing.TB, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing at deadline: %v", what, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// served is a Server running Serve in a goroutine.
type served struct {
	*Server
	done chan struct{} // closed when Serve returned
	err  error         // Serve's result, valid after done
}

// startServer serves cfg (with the test logger when cfg.Logger is nil) after
// running register on its grpc.Server, waits until the socket accepts
// connections, and stops it at cleanup, failing the test if Serve did not
// return nil.
func startServer(t testing.TB, cfg ServerConfig, register ...func(*grpc.Server)) *served {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(t)
	}
	s := &served{Server: NewServer(cfg), done: make(chan struct{})}
	for _, r := range register {
		r(s.GRPC())
	}
	go func() {
		s.err = s.Serve()
		close(s.done)
	}()
	t.Cleanup(func() {
		s.Stop()
		<-s.done
		if s.err != nil {
			t.Errorf("Serve: %v", s.err)
		}
	})
	eventually(t, "server accepts connections", func() error {
		select {
		case <-s.done:
			t.Fatalf("Serve returned early: %v", s.err)
		default:
		}
		c, err := net.Dial("unix", cfg.SocketPath)
		if err != nil {
			return err
		}
		c.Close()
		// A connect succeeds once the socket is bound, before Listen
		// set its mode: a test that changes the mode must come after.
		if fi, err := os.Stat(cfg.SocketPath); err != nil || fi.Mode().Perm() != socketMode {
			return fmt.Errorf("socket mode not set yet (%v)", err)
		}
		return nil
	})
	return s
}

// waitServe waits for Serve to return and returns its result.
func (s *served) waitServe(t testing.TB) error {
	t.Helper()
	select {
	case <-s.done:
		return s.err
	case <-time.After(30 * time.Second):
		t.Fatal("Serve did not return")
		return nil
	}
}

func dial(t testing.TB, path string) *grpc.ClientConn {
	t.Helper()
	cc, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// testService is a hand-written gRPC service (no protoc) for exercising the
// server's interceptors and shutdown.
type testService struct {
	started chan struct{} // receives when Slow or Watch begins
	release chan struct{} // closed to let Slow return

	mu   sync.Mutex
	peer PeerCred // the caller of the last Ping
}

const testServiceName = "netdra.rpctest.Test"

func newTestService() *testService {
	return &testService{started: make(chan struct{}, 16), release: make(chan struct{})}
}

func (s *testService) register(g *grpc.Server) {
	unary := func(name string, fn func(ctx context.Context) error) grpc.MethodDesc {
		return grpc.MethodDesc{
			MethodName: name,
			Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
				in := new(emptypb.Empty)
				if err := dec(in); err != nil {
					return nil, err
				}
				h := func(ctx context.Context, _ any) (any, error) {
					if err := fn(ctx); err != nil {
						return nil, err
					}
					return &emptypb.Empty{}, nil
				}
				if ic == nil {
					return h(ctx, in)
				}
				return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + testServiceName + "/" + name}, h)
			},
		}
	}
	stream := func(name string, fn func(grpc.ServerStream) error) grpc.StreamDesc {
		return grpc.StreamDesc{
			StreamName:    name,
			ServerStreams: true,
			Handler: func(_ any, ss grpc.ServerStream) error {
				if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
					return err
				}
				return fn(ss)
			},
		}
	}
	g.RegisterService(&grpc.ServiceDesc{
		ServiceName: testServiceName,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{
			unary("Ping", s.ping),
			unary("Slow", s.slow),
			unary("Panic", func(context.Context) error { panic("boom") }),
		},
		Streams: []grpc.StreamDesc{
			stream("Watch", s.watch),
			stream("PanicStream", func(grpc.ServerStream) error { panic("stream boom") }),
		},
	}, s)
}

func (s *testService) ping(ctx context.Context) error {
	pc, ok := PeerCredFromContext(ctx)
	if !ok {
		return status.Error(codes.Internal, "no peer credentials")
	}
	s.mu.Lock()
	s.peer = pc
	s.mu.Unlock()
	return nil
}

func (s *testService) slow(ctx context.Context) error {
	s.started <- struct{}{}
	select {
	case <-s.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// watch sends one message and then holds the stream open until cancelled.
func (s *testService) watch(ss grpc.ServerStream) error {
	if err := ss.SendMsg(&emptypb.Empty{}); err != nil {
		return err
	}
	s.started <- struct{}{}
	<-ss.Context().Done()
	return ss.Context().Err()
}

// call invokes a unary method of the test service.
func call(ctx context.Context, cc grpc.ClientConnInterface, method string) error {
	return cc.Invoke(ctx, "/"+testServiceName+"/"+method, &emptypb.Empty{}, &emptypb.Empty{})
}

// openStream opens a server stream of the test service and reads its first
// message.
func openStream(ctx context.Context, cc *grpc.ClientConn, method string) (grpc.ClientStream, error) {
	cs, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/"+testServiceName+"/"+method)
	if err != nil {
		return nil, err
	}
	if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
		return nil, err
	}
	if err := cs.CloseSend(); err != nil {
		return nil, err
	}
	if err := cs.RecvMsg(new(emptypb.Empty)); err != nil {
		return nil, err
	}
	return cs, nil
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func isNotExist(path string) error {
	if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
		return errors.New(path + " still exists")
	}
	return nil
}
