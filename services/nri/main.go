// Command nri is netdra's NRI plugin: it attaches a pod's prepared devices
// into the pod's network namespace when the container runtime starts the
// sandbox, and detaches them when it stops. It needs only the runtime's NRI
// socket and the netdra sockets: no privileges, no Kubernetes credentials.
package main

import (
	"context"
	"flag"
	"fmt"
	nrilog "github.com/containerd/nri/pkg/log"
	"log/slog"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/gatehook"
	"github.com/netdra/netdra/services/nri/hookbin"
	"github.com/netdra/netdra/services/nri/plugin"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/process/metrics"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	NRI   plugin.Connection
	Peers process.Peers
	// Metrics is where Prometheus metrics are served; empty for none.
	Metrics string
	// Gate is the hook containers wait for their pod's attach in, and
	// the socket it calls.
	Gate plugin.Gate
}

func main() {
	if len(os.Args) == 3 && os.Args[1] == "install-hook" {
		os.Exit(installHook(os.Args[2]))
	}
	var cfg config
	fs := flag.NewFlagSet("nri", flag.ContinueOnError)
	cfg.Register(fs, "nri")
	cfg.Inspect = func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return nriv1.NewNriServiceClient(cc).Status(ctx, &nriv1.StatusRequest{})
	}
	fs.StringVar(&cfg.NRI.Socket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.StringVar(&cfg.NRI.Name, "plugin-name", "netdra", "NRI plugin name ([a-zA-Z0-9_.+-])")
	fs.StringVar(&cfg.NRI.Index, "plugin-index", "50", "NRI plugin index (two digits): the order among plugins")
	cfg.Peers.Register(fs)
	fs.StringVar(&cfg.Metrics, "metrics-address", "127.0.0.1:9652", "where to serve Prometheus metrics (empty: nowhere)")
	fs.StringVar(&cfg.Gate.Hook, "gate-hook", "", "the netdra-hook binary's path on the host, added as an OCI hook to a container without dra's, to wait for its pod's devices; empty: CreateContainer waits under the runtime's lock. Needs -gate-socket")
	fs.StringVar(&cfg.Gate.Socket, "gate-socket", "/run/netdra-gate/nri.sock", "the unix socket the hooks ask (dra's -gate-socket, -gate-hook's), at a path the host sees (a hostPath); empty: no gate")
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, cfg.run))
}

// installHook is `nri install-hook <path>`: it copies the netdra-hook
// binary beside this one to path on the host (the DaemonSet's init
// container, from an image with no shell), atomically, mode 0755, for the
// runtime to run as the netns check and gate hook.
func installHook(path string) int {
	if err := hookbin.Install(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	// The NRI stub logs through NRI's logger (logrus text by default): its
	// lines go through nri's logger, in its format and at its level.
	nrilog.Set(nriLogger{log.With("component", "nri-stub")})
	state, prov, closeConns, err := cfg.Peers.Dial(rpc.RetryUnavailable(plugin.RetriedMethods...))
	if err != nil {
		return err
	}
	defer closeConns()
	peers := cfg.Peers.Watch(ctx, log, state, prov)
	reg := metrics.NewRegistry()
	p := plugin.New(log, statev1.NewStateServiceClient(state), provisionerv1.NewProvisionerServiceClient(prov), reg)
	p.SetWaiting(peers.Waiting)
	defer p.Wait()
	serveMetrics, err := metrics.Serve(cfg.Metrics, reg, log)
	if err != nil {
		return err
	}

	// The admin socket: health, reflection and Status.
	calls := metrics.NewGRPC(reg)
	srv := rpc.NewServer(calls.Server(cfg.ServerConfig(log)))
	nriv1.RegisterNriServiceServer(srv.GRPC(), p.Service())
	srv.SetServing(nriv1.NriService_ServiceDesc.ServiceName, true)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nri := process.Actor{
		Execute:   func() error { return p.Serve(ctx, cfg.NRI) },
		Interrupt: func(error) { cancel() },
	}
	actors := []process.Actor{nri, serveMetrics}
	if cfg.Gate.Socket != "" {
		ln, err := rpc.Listen(cfg.Gate.Socket)
		if err != nil {
			return fmt.Errorf("the gate socket: %w", err)
		}
		gctx, stop := context.WithCancel(ctx)
		gate := gatehook.Server{Wait: p.GateWait, Admit: rpc.AdmitUIDs(cfg.Gate.Socket, cfg.AllowedUIDs), Warn: log.With("socket", cfg.Gate.Socket).Warn}
		actors = append(actors, process.Actor{Execute: func() error { return gate.Serve(gctx, ln) }, Interrupt: func(error) { stop() }})
		p.WithGate(cfg.Gate)
	}
	log.Info("Serving", "socket", cfg.Socket, "nri", cfg.NRI.Socket, "gateHook", cfg.Gate.Hook, "gateSocket", cfg.Gate.Socket)
	return process.RunServer(ctx, log, srv, actors...)
}

// nriLogger is NRI's logger interface over slog.
type nriLogger struct{ log *slog.Logger }

func (l nriLogger) Debugf(ctx context.Context, format string, args ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, args...))
}

func (l nriLogger) Infof(ctx context.Context, format string, args ...any) {
	l.log.InfoContext(ctx, fmt.Sprintf(format, args...))
}

func (l nriLogger) Warnf(ctx context.Context, format string, args ...any) {
	l.log.WarnContext(ctx, fmt.Sprintf(format, args...))
}

func (l nriLogger) Errorf(ctx context.Context, format string, args ...any) {
	l.log.ErrorContext(ctx, fmt.Sprintf(format, args...))
}
