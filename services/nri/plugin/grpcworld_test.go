package plugin

import (
	"context"
	"log/slog"
	"net"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/rpc"
)

// stateServer serves a world's fake state service over gRPC.
type stateServer struct {
	statev1.UnimplementedStateServiceServer
	f fakeState
}

func (s stateServer) ListAllocations(ctx context.Context, r *statev1.ListAllocationsRequest) (*statev1.ListAllocationsResponse, error) {
	return s.f.ListAllocations(ctx, r)
}

func (s stateServer) MarkAttached(ctx context.Context, r *statev1.MarkAttachedRequest) (*statev1.MarkAttachedResponse, error) {
	return s.f.MarkAttached(ctx, r)
}

func (s stateServer) MarkDetached(ctx context.Context, r *statev1.MarkDetachedRequest) (*statev1.MarkDetachedResponse, error) {
	return s.f.MarkDetached(ctx, r)
}

// provisionerServer serves a world's fake provisioner over gRPC.
type provisionerServer struct {
	provisionerv1.UnimplementedProvisionerServiceServer
	f fakeProvisioner
}

func (s provisionerServer) Setup(ctx context.Context, r *provisionerv1.SetupRequest) (*provisionerv1.SetupResponse, error) {
	return s.f.Setup(ctx, r)
}

func (s provisionerServer) Attach(ctx context.Context, r *provisionerv1.AttachRequest) (*provisionerv1.AttachResponse, error) {
	return s.f.Attach(ctx, r)
}

func (s provisionerServer) Detach(ctx context.Context, r *provisionerv1.DetachRequest) (*provisionerv1.DetachResponse, error) {
	return s.f.Detach(ctx, r)
}

// newPluginOverGRPC is newPlugin with w's services behind gRPC on unix
// sockets, dialed as nri's main dials them (rpc.Dial with
// RetryUnavailable(RetriedMethods...)): what the plugin gets of a server
// that fails is what grpc's channel makes of it.
func newPluginOverGRPC(t *testing.T, w *world) *Plugin {
	t.Helper()
	dir := t.TempDir()
	serve := func(name string, register func(*grpc.Server)) *grpc.ClientConn {
		path := filepath.Join(dir, name+".sock")
		l, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		g := grpc.NewServer()
		register(g)
		go func() { _ = g.Serve(l) }()
		t.Cleanup(g.Stop)
		cc, err := rpc.Dial(path, rpc.RetryUnavailable(RetriedMethods...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	state := serve("state", func(g *grpc.Server) { statev1.RegisterStateServiceServer(g, stateServer{f: fakeState{w: w}}) })
	prov := serve("provisioner", func(g *grpc.Server) {
		provisionerv1.RegisterProvisionerServiceServer(g, provisionerServer{f: fakeProvisioner{w: w}})
	})
	p := New(slog.New(slog.NewTextHandler(testWriter{t}, nil)), statev1.NewStateServiceClient(state),
		provisionerv1.NewProvisionerServiceClient(prov), prometheus.NewRegistry())
	t.Cleanup(p.Wait)
	return p
}
