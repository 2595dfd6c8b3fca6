package minigrpc_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/rpc/minigrpc"
)

const method = "/netdra.nri.v1.NriService/WaitAttached"

// fakeNri is the real gRPC server's side: an NriService whose
// WaitAttached is the test's.
type fakeNri struct {
	nriv1.UnimplementedNriServiceServer
	waitAttached func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error)
}

func (f fakeNri) WaitAttached(ctx context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
	return f.waitAttached(ctx, req)
}

// serve runs netdra's gRPC server (rpc.NewServer: health, reflection, the
// uid allow-list) with an NriService on a fresh socket, stopped at the end
// of the test.
func serve(t *testing.T, socket string, f func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error)) *rpc.Server {
	t.Helper()
	srv := rpc.NewServer(rpc.ServerConfig{SocketPath: socket, Logger: slog.New(slog.DiscardHandler), StopTimeout: 100 * time.Millisecond})
	nriv1.RegisterNriServiceServer(srv.GRPC(), fakeNri{waitAttached: f})
	done := make(chan struct{})
	go func() { _ = srv.Serve(); close(done) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := os.Stat(socket); err == nil {
			return srv
		}
		if time.Now().After(deadline) {
			t.Fatal("the server did not listen")
		}
	}
}

func socketPath(t *testing.T) string {
	dir, err := os.MkdirTemp("", "mg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "s.sock")
}

// callBoth makes the call with minigrpc and with grpc-go's client and
// returns both statuses (nil for OK).
func callBoth(t *testing.T, socket string, req *nriv1.WaitAttachedRequest, timeout time.Duration) (mini, ref *minigrpc.Status) {
	t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	resp, err := minigrpc.Call(ctx, socket, method, b)
	if err != nil {
		if !errors.As(err, &mini) {
			t.Fatalf("minigrpc.Call: %v is not a *Status", err)
		}
	} else if len(resp) != 0 {
		t.Errorf("response %x, want an empty WaitAttachedResponse", resp)
	}

	cc, err := rpc.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel = context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := nriv1.NewNriServiceClient(cc).WaitAttached(ctx, req); err != nil {
		st := status.Convert(err)
		ref = &minigrpc.Status{Code: minigrpc.Code(st.Code()), Message: st.Message()}
	}
	return mini, ref
}

func TestCall_AsGRPCGo(t *testing.T) {
	big := strings.Repeat("é≠%", 12000) // 84 KB, percent-encoded to 2.5 times that: CONTINUATION frames
	for _, tc := range []struct {
		name    string
		req     *nriv1.WaitAttachedRequest
		handler func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error)
		timeout time.Duration // 2s when zero
		want    *minigrpc.Status
		// codeOnly compares the codes alone: which of the client's and the
		// server's timers fires first (a reset stream, or the context)
		// decides the message, in grpc-go's client as in minigrpc.
		codeOnly bool
	}{{
		name: "ok",
		req:  &nriv1.WaitAttachedRequest{PodUid: "u1", NetnsPath: "/var/run/netns/p1"},
		handler: func(_ context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			if req.GetPodUid() != "u1" || req.GetNetnsPath() != "/var/run/netns/p1" {
				return nil, status.Errorf(codes.InvalidArgument, "request %v", req)
			}
			return &nriv1.WaitAttachedResponse{}, nil
		},
	}, {
		name: "refused, the message percent-encoded",
		req:  &nriv1.WaitAttachedRequest{PodUid: "u1"},
		handler: func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, "netdra: pod ü: device «data1» 100% down\n\ttab")
		},
		want: &minigrpc.Status{Code: minigrpc.FailedPrecondition, Message: "netdra: pod ü: device «data1» 100% down\n\ttab"},
	}, {
		name: "the server's own deadline",
		handler: func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return nil, status.Error(codes.DeadlineExceeded, "netdra: pod u1: the attach has not ended")
		},
		want: &minigrpc.Status{Code: minigrpc.DeadlineExceeded, Message: "netdra: pod u1: the attach has not ended"},
	}, {
		name: "the call's deadline",
		handler: func(ctx context.Context, _ *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			<-ctx.Done()
			time.Sleep(100 * time.Millisecond) // the client gives up first
			return &nriv1.WaitAttachedResponse{}, nil
		},
		timeout:  300 * time.Millisecond,
		want:     &minigrpc.Status{Code: minigrpc.DeadlineExceeded, Message: "context deadline exceeded"},
		codeOnly: true,
	}, {
		name: "a big message",
		handler: func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, big)
		},
		want: &minigrpc.Status{Code: minigrpc.FailedPrecondition, Message: big},
	}, {
		name: "a big request: DATA within the server's flow-control windows",
		req:  &nriv1.WaitAttachedRequest{PodUid: strings.Repeat("u", 300_000), NetnsPath: "n"},
		handler: func(_ context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return nil, status.Errorf(codes.FailedPrecondition, "got %d bytes", len(req.GetPodUid()))
		},
		want: &minigrpc.Status{Code: minigrpc.FailedPrecondition, Message: "got 300000 bytes"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			socket := socketPath(t)
			serve(t, socket, tc.handler)
			req := tc.req
			if req == nil {
				req = &nriv1.WaitAttachedRequest{PodUid: "u1", NetnsPath: "n"}
			}
			timeout := tc.timeout
			if timeout == 0 {
				timeout = 2 * time.Second
			}
			mini, ref := callBoth(t, socket, req, timeout)
			if tc.codeOnly {
				if ref == nil || mini == nil || ref.Code != tc.want.Code || mini.Code != tc.want.Code {
					t.Errorf("grpc-go's client: %v, minigrpc: %v, want code %v", short(ref), short(mini), tc.want.Code)
				}
				return
			}
			if fmt.Sprint(ref) != fmt.Sprint(tc.want) {
				t.Errorf("grpc-go's client: %v, want %v", short(ref), short(tc.want))
			}
			if fmt.Sprint(mini) != fmt.Sprint(ref) {
				t.Errorf("minigrpc: %v, grpc-go's client: %v", short(mini), short(ref))
			}
		})
	}
}

func short(st *minigrpc.Status) string {
	if st == nil {
		return "OK"
	}
	s := st.Error()
	if len(s) > 200 {
		return fmt.Sprintf("%s... (%d bytes)", s[:200], len(s))
	}
	return s
}

// TestCall_Unimplemented: a method the server does not have.
func TestCall_Unimplemented(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, nil)
	_, err := minigrpc.Call(context.Background(), socket, "/netdra.nri.v1.NriService/Nope", nil)
	var st *minigrpc.Status
	if !errors.As(err, &st) || st.Code != minigrpc.Unimplemented {
		t.Fatalf("Call: %v, want Unimplemented", err)
	}
}

// TestCall_WaitsForTheServer: a call made while nothing listens waits
// for the server, as grpc-go's WaitForReady does, until its deadline.
func TestCall_WaitsForTheServer(t *testing.T) {
	socket := socketPath(t)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := minigrpc.Call(ctx, socket, method, nil)
	if want := "rpc error: code = DeadlineExceeded desc = context deadline exceeded"; err == nil || err.Error() != want {
		t.Fatalf("Call with nothing listening: %v, want %s", err, want)
	}
	if d := time.Since(start); d < 250*time.Millisecond || d > 2*time.Second {
		t.Errorf("Call gave up after %v, want its 300ms", d)
	}

	go func() {
		time.Sleep(300 * time.Millisecond)
		serve(t, socket, func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return &nriv1.WaitAttachedResponse{}, nil
		})
	}()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := minigrpc.Call(ctx, socket, method, nil); err != nil {
		t.Fatalf("Call before the server listens: %v", err)
	}
}

// TestCall_ServerStopsMidCall: the server goes away while the call is in
// its handler: Unavailable, as grpc-go's client says it (the client
// called beside minigrpc).
func TestCall_ServerStopsMidCall(t *testing.T) {
	socket := socketPath(t)
	inHandler := make(chan struct{}, 2)
	var srv *rpc.Server
	srv = serve(t, socket, func(ctx context.Context, _ *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
		inHandler <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	errs := make(chan error, 2)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := minigrpc.Call(ctx, socket, method, []byte{0x0a, 0x01, 'u'})
		errs <- err
	}()
	cc, err := rpc.Dial(socket)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := nriv1.NewNriServiceClient(cc).WaitAttached(ctx, &nriv1.WaitAttachedRequest{PodUid: "u"})
		errs <- err
	}()
	<-inHandler
	<-inHandler
	srv.GRPC().Stop() // closes every connection at once
	want := "rpc error: code = Unavailable desc = error reading from server: EOF"
	for range 2 { // minigrpc's and grpc-go's
		if err := <-errs; err == nil || err.Error() != want {
			t.Errorf("Call: %v, want %s", err, want)
		}
	}
}

// TestCall_Cancelled: a cancelled ctx ends a call at once.
func TestCall_Cancelled(t *testing.T) {
	socket := socketPath(t)
	serve(t, socket, func(ctx context.Context, _ *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	_, err := minigrpc.Call(ctx, socket, method, nil)
	if want := "rpc error: code = Canceled desc = context canceled"; err == nil || err.Error() != want {
		t.Fatalf("Call: %v, want %s", err, want)
	}
}
