// Command nri is netdra's NRI plugin: it attaches a pod's prepared devices
// into the pod's network namespace when the container runtime starts the
// sandbox, and detaches them when it stops. It needs only the runtime's NRI
// socket and the netdra sockets: no privileges, no Kubernetes credentials.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	nriv1 "github.com/netdra/netdra/protos/netdra/nri/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/nri/netnscheck"
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
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == netnscheck.Subcommand {
		os.Exit(checkNetns(os.Args[2:]))
	}
	if len(os.Args) == 3 && os.Args[1] == "install-hook" {
		os.Exit(installHook(os.Args[2]))
	}
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

// checkNetns is `nri check-netns -ifname net1 [-ifname net2 ...]`, the OCI
// createRuntime hook dra puts on netdra's CDI devices (package netnscheck):
// exit 0 when every interface is in the container's netns, else 1 with the
// reason on stderr, which the runtime reports as the creation's error.
func checkNetns(args []string) int {
	fs := flag.NewFlagSet("nri "+netnscheck.Subcommand, flag.ContinueOnError)
	var c netnscheck.Check
	fs.Func("ifname", "an interface that must be in the container's netns (repeatable)", func(s string) error {
		c.IfNames = append(c.IfNames, s)
		return nil
	})
	fs.StringVar(&c.ProcRoot, "proc", "/proc", "the proc filesystem")
	fs.DurationVar(&c.Wait, "wait", netnscheck.DefaultWait, "how long an interface may take to appear")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := c.Run(os.Stdin); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// installHook is `nri install-hook <path>`: it copies this binary to path
// on the host (the DaemonSet's init container, from an image with no
// shell), atomically, mode 0755, for the runtime to run as the netns
// check hook.
func installHook(path string) int {
	if err := netnscheck.Install(path); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	state, prov, closeConns, err := cfg.Peers.Dial()
	if err != nil {
		return err
	}
	defer closeConns()
	reg := metrics.NewRegistry()
	p := plugin.New(log, statev1.NewStateServiceClient(state), provisionerv1.NewProvisionerServiceClient(prov), reg)
	serveMetrics, err := metrics.Serve(cfg.Metrics, reg)
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
	return process.RunServer(ctx, log, srv, nri, serveMetrics)
}
