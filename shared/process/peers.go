package process

import (
	"context"
	"flag"
	"log/slog"

	"google.golang.org/grpc"

	"github.com/netdra/netdra/shared/rpc"
)

// Peers are the sockets of the node processes that dra and nri call: the
// state service's and the provisioner's.
type Peers struct {
	StateSocket     string
	ProvisionerSock string
}

// Register adds -state-socket and -provisioner-socket to fs, defaulting to
// the sockets in SocketDir.
func (p *Peers) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.StateSocket, "state-socket", SocketDir+"/state.sock", "the state service's socket")
	fs.StringVar(&p.ProvisionerSock, "provisioner-socket", SocketDir+"/provisioner.sock", "the provisioner's socket")
}

// Dial returns connections to the state service and the provisioner
// (rpc.Dial, with opts: they connect at the first call and outlive
// restarts of either server) and closeAll, which closes both.
func (p *Peers) Dial(opts ...grpc.DialOption) (state, provisioner *grpc.ClientConn, closeAll func(), err error) {
	state, err = rpc.Dial(p.StateSocket, opts...)
	if err != nil {
		return nil, nil, nil, err
	}
	provisioner, err = rpc.Dial(p.ProvisionerSock, opts...)
	if err != nil {
		state.Close()
		return nil, nil, nil, err
	}
	return state, provisioner, func() { _ = provisioner.Close(); _ = state.Close() }, nil
}

// Watch watches the connections Dial returned until ctx ends
// (rpc.PeerWatch): a peer that stays unreachable is logged, with the
// reason, and named by the returned watch's Waiting.
func (p *Peers) Watch(ctx context.Context, log *slog.Logger, state, provisioner *grpc.ClientConn) *rpc.PeerWatch {
	w := rpc.NewPeerWatch(log, 0)
	go w.Watch(ctx, "state service", p.StateSocket, state)
	go w.Watch(ctx, "provisioner", p.ProvisionerSock, provisioner)
	return w
}
