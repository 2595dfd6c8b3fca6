// Command nri is netdra's NRI plugin: it attaches a pod's prepared devices
// into the pod's network namespace when the container runtime starts the
// sandbox, and detaches them when it stops. It needs only the runtime's NRI
// socket and the netdra sockets: no privileges, no Kubernetes credentials.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/plugin"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	NRI   plugin.Connection
	Peers process.Peers
	// Metrics is where Prometheus metrics are served; empty for none.
	Metrics string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("nri", flag.ContinueOnError)
	cfg.Register(fs, "nri")
	fs.StringVar(&cfg.NRI.Socket, "nri-socket", "/var/run/nri/nri.sock", "the container runtime's NRI socket")
	fs.StringVar(&cfg.NRI.Name, "plugin-name", "netdra", "NRI plugin name ([a-zA-Z0-9_.+-])")
	fs.StringVar(&cfg.NRI.Index, "plugin-index", "50", "NRI plugin index (two digits): the order among plugins")
	cfg.Peers.Register(fs)
	fs.StringVar(&cfg.Metrics, "metrics-address", "127.0.0.1:9652", "where to serve Prometheus metrics (empty: nowhere)")
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, cfg.run))
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	state, prov, closeConns, err := cfg.Peers.Dial()
	if err != nil {
		return err
	}
	defer closeConns()
	reg := process.NewRegistry()
	p := plugin.New(log, statev1.NewStateServiceClient(state), provisionerv1.NewProvisionerServiceClient(prov), reg)
	metrics, err := process.ServeMetrics(cfg.Metrics, reg)
	if err != nil {
		return err
	}

	// The admin socket: health, reflection and Status.
	srv := rpc.NewServer(cfg.ServerConfig(log))
	nriv1.RegisterNriServiceServer(srv.GRPC(), p.StatusServer())
	srv.SetServing(nriv1.NriService_ServiceDesc.ServiceName, true)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nri := process.Actor{
		Execute:   func() error { return p.Serve(ctx, cfg.NRI) },
		Interrupt: func(error) { cancel() },
	}
	log.Info("Serving", "socket", cfg.Socket, "nri", cfg.NRI.Socket)
	return process.RunServer(ctx, log, srv, nri, metrics)
}
