package plugin

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/netdra/netdra/shared/rpc"
)

// Connection says how the plugin reaches the runtime.
type Connection struct {
	// Socket is the runtime's NRI socket (/var/run/nri/nri.sock).
	Socket string
	// Name and Index identify the plugin; Index is two digits and orders
	// the plugins the runtime calls.
	Name, Index string
}

// Serve keeps the plugin connected to the runtime until ctx ends: when the
// runtime restarts or the connection drops, it reconnects with backoff and
// never gives up. The plugin asks the runtime to fail a request it cannot
// answer in time instead of going on without it (fail closed), and to keep
// it registered after a slow request.
func (p *Plugin) Serve(ctx context.Context, c Connection) error {
	return rpc.Retry(ctx, p.log, "NRI connection", func(ctx context.Context) error {
		// The stub notices a lost connection only through its close
		// callback: end this run then, and connect again.
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		closed := func() {
			p.conn.setConnected(false)
			cancel()
		}
		p.conn.socket.Store(c.Socket)
		s, err := stub.New(p,
			stub.WithOnClose(closed),
			stub.WithSocketPath(c.Socket),
			stub.WithPluginName(c.Name),
			stub.WithPluginIdx(c.Index),
			stub.WithFailurePolicy(&api.FailurePolicy{FailRequest: true, KeepConnected: true}),
		)
		if err != nil {
			return fmt.Errorf("creating the NRI stub: %w", err)
		}
		p.log.Info("Connecting to the runtime", "socket", c.Socket)
		err = s.Run(ctx)
		s.Stop()
		return fmt.Errorf("NRI connection closed: %w", err)
	})
}
