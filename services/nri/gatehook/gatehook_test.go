package gatehook

import (
	"bytes"
	"context"
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
)

// TestMarshalRequest: the hand-written encoding is protobuf's.
func TestMarshalRequest(t *testing.T) {
	for _, req := range []*nriv1.WaitAttachedRequest{
		{},
		{PodUid: "0f6d4c1e-8b3a-4c55-9d2e-7a1b2c3d4e5f", NetnsPath: "/var/run/netns/cni-1234"},
		{NetnsPath: "only the netns"},
		{PodUid: "ü≠", NetnsPath: strings.Repeat("n", 300)}, // a two-byte length
		{PodUid: strings.Repeat("u", 70000)},                // a three-byte length
	} {
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		if got := marshalRequest(req.GetPodUid(), req.GetNetnsPath()); !bytes.Equal(got, want) {
			t.Errorf("marshalRequest(%.40q, %.40q) = %.40x, want %.40x", req.GetPodUid(), req.GetNetnsPath(), got, want)
		}
	}
}

type fakeNri struct {
	nriv1.UnimplementedNriServiceServer
	waitAttached func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error)
}

func (f fakeNri) WaitAttached(ctx context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
	return f.waitAttached(ctx, req)
}

// TestWaitAttached: the plugin's answers, through netdra's real gRPC
// server, read to the runtime as they did through grpc-go's client.
func TestWaitAttached(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) // nil: nothing listens
		want    string                                                                                 // "": attached
	}{{
		name: "attached",
		handler: func(_ context.Context, req *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			if req.GetPodUid() != "u1" || req.GetNetnsPath() != "/var/run/netns/p1" {
				return nil, status.Errorf(codes.InvalidArgument, "request %v", req)
			}
			return &nriv1.WaitAttachedResponse{}, nil
		},
	}, {
		name: "refused: the plugin's reason alone",
		handler: func(context.Context, *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			return nil, status.Error(codes.FailedPrecondition, "netdra: pod u1: device data1 (claim default/c): attaching data1: 100% «gone»")
		},
		want: "netdra: pod u1: device data1 (claim default/c): attaching data1: 100% «gone»",
	}, {
		name: "no answer in time",
		handler: func(ctx context.Context, _ *nriv1.WaitAttachedRequest) (*nriv1.WaitAttachedResponse, error) {
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond)
			return nil, status.Error(codes.DeadlineExceeded, "netdra: pod u1: late")
		},
		want: "netdra: the container is not started without its pod's devices: netdra's nri plugin (SOCKET) did not say they are attached within 300ms: rpc error: code = DeadlineExceeded desc = context deadline exceeded",
	}, {
		name: "nothing listening",
		want: "netdra: the container is not started without its pod's devices: netdra's nri plugin (SOCKET) did not say they are attached within 300ms: rpc error: code = DeadlineExceeded desc = context deadline exceeded",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			dir, err := os.MkdirTemp("", "gh")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(dir) })
			socket := filepath.Join(dir, "gate.sock")
			if tc.handler != nil {
				srv := rpc.NewServer(rpc.ServerConfig{SocketPath: socket, Logger: slog.New(slog.DiscardHandler), StopTimeout: 100 * time.Millisecond})
				nriv1.RegisterNriServiceServer(srv.GRPC(), fakeNri{waitAttached: tc.handler})
				go func() { _ = srv.Serve() }()
				t.Cleanup(srv.Stop)
			}
			err = WaitAttached(context.Background(), socket, "u1", "/var/run/netns/p1", 300*time.Millisecond)
			got := ""
			if err != nil {
				got = strings.ReplaceAll(err.Error(), socket, "SOCKET")
			}
			if got != tc.want {
				t.Errorf("WaitAttached: %q\nwant %q", got, tc.want)
			}
		})
	}
}
