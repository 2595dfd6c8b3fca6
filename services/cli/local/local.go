// Package local reads a node's processes through their sockets on this
// host (kubectl netdra node --socket-dir): for a run on the node itself,
// as root or a uid the processes allow, when the cluster cannot exec into
// the node pod. It asks the same read-only calls as their inspect
// subcommand; the binaries' versions are not known this way.
package local

import (
	"context"
	"fmt"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	drav1 "github.com/netdra/netdra/protos/netdra/dra/v1"
	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/process"
)

// inspectors are the processes' status calls, as their mains give them to
// process.Flags.Inspect; the provisioner has none.
var inspectors = map[string]process.Inspector{
	"state": func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return statev1.NewStateServiceClient(cc).Dump(ctx, &statev1.DumpRequest{})
	},
	"dra": func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return drav1.NewDraServiceClient(cc).Status(ctx, &drav1.StatusRequest{})
	},
	"nri": func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return nriv1.NewNriServiceClient(cc).Status(ctx, &nriv1.StatusRequest{})
	},
	"provisioner": nil,
}

// Sockets reads the processes whose sockets are <Dir>/<process>.sock.
type Sockets struct {
	Dir string
}

// Inspect asks the process's socket for its health and status.
func (s Sockets) Inspect(ctx context.Context, name string) (process.Report, error) {
	in, ok := inspectors[name]
	if !ok {
		return process.Report{}, fmt.Errorf("no process %q", name)
	}
	return process.Inspect(ctx, name, filepath.Join(s.Dir, name+".sock"), in), nil
}
