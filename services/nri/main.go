// Command nri is netdra's NRI plugin: it attaches a pod's prepared devices
// into the pod's network namespace when the container runtime starts the
// sandbox, and detaches them when it stops. It needs only the runtime's NRI
// socket and the netdra sockets: no privileges, no Kubernetes credentials.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

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
	// Gate is the hook containers wait for their pod's attach in, and
	// the socket it calls.
	Gate plugin.Gate
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == netnscheck.Subcommand {
		os.Exit(checkNetns(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == plugin.WaitSubcommand {
		os.Exit(waitAttached(os.Args[2:]))
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
	fs.StringVar(&cfg.Gate.Hook, "gate-hook", "", "the nri binary's path on the host (installed there by the DaemonSet, as for dra's -netns-hook): a container created while its pod's devices are still being attached gets `nri wait-attached` as an OCI createRuntime hook, which waits for them outside the runtime's NRI lock; empty: CreateContainer waits, holding the runtime's lock (set it empty when the runtime's NRI validator rejects OCI hook adjustments). Needs -gate-socket")
	fs.StringVar(&cfg.Gate.Socket, "gate-socket", "/run/netdra-gate/nri.sock", "the unix socket the gate hook calls (WaitAttached), at a path the host sees: a hostPath, not the emptyDir of -socket")
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

// waitAttached is `nri wait-attached -socket S -pod UID -netns PATH`, the
// OCI createRuntime hook nri's CreateContainer puts on a container whose
// pod's devices are still being attached (plugin.Gate): exit 0 once they
// are all in the pod's netns, else 1 with the reason on stderr, which the
// runtime reports as the creation's error.
func waitAttached(args []string) int {
	fs := flag.NewFlagSet("nri "+plugin.WaitSubcommand, flag.ContinueOnError)
	socket := fs.String("socket", "", "nri's gate socket")
	req := &nriv1.WaitAttachedRequest{}
	fs.StringVar(&req.PodUid, "pod", "", "the pod's UID")
	fs.StringVar(&req.NetnsPath, "netns", "", "the pod sandbox's netns path")
	wait := fs.Duration("wait", time.Duration(plugin.GateHookTimeout-1)*time.Second, "how long to wait for the attach")
	if code, ok := process.ParseArgs(fs, args, os.Stderr); !ok {
		return code
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(os.Stdin, 1<<20)) // the OCI state: the runtime writes it
	if err := plugin.CallWaitAttached(context.Background(), *socket, req, *wait); err != nil {
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
	defer p.Wait()
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
	actors := []process.Actor{nri, serveMetrics}
	if cfg.Gate.Hook != "" {
		gate := rpc.NewServer(rpc.ServerConfig{SocketPath: cfg.Gate.Socket, AllowedUIDs: cfg.AllowedUIDs, Logger: log})
		nriv1.RegisterNriServiceServer(gate.GRPC(), p.StatusServer())
		gate.SetServing(nriv1.NriService_ServiceDesc.ServiceName, true)
		actors = append(actors, process.Actor{Execute: gate.Serve, Interrupt: func(error) { gate.Stop() }})
		p.WithGate(cfg.Gate)
	}
	log.Info("Serving", "socket", cfg.Socket, "nri", cfg.NRI.Socket, "gateHook", cfg.Gate.Hook, "gateSocket", cfg.Gate.Socket)
	return process.RunServer(ctx, log, srv, actors...)
}
