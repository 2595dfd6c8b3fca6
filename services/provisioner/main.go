// Command provisioner is netdra's only privileged process: it discovers
// devices (sysfs, netlink), provisions SR-IOV VFs, sets devices up for claims
// and moves them into pods and back. It serves
// netdra.provisioner.v1.ProvisionerService on a unix socket and holds no
// Kubernetes credentials: dra and nri tell it what to do.
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/server"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	// SysfsRoot is where the host's /sys is mounted (/host/sys in a pod).
	SysfsRoot string
	// Resync is how often the managers rediscover besides link events.
	Resync time.Duration
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("provisioner", flag.ContinueOnError)
	cfg.Register(fs, "provisioner")
	fs.StringVar(&cfg.SysfsRoot, "sysfs-root", "/sys", "where the host's sysfs is mounted")
	fs.DurationVar(&cfg.Resync, "resync", 30*time.Second, "how often device managers rediscover, besides link events")
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, cfg.run))
}

// factories builds the managers; the host netns is the process's own.
func (cfg *config) factories(log *slog.Logger) server.Factories {
	return server.Factories{
		Sriov: func(c *provisionerv1.SriovConfig) (manager.Manager, error) {
			return sriov.New(log.With("manager", "sr-iov"), cfg.SysfsRoot, c, sriov.WithResync(cfg.Resync))
		},
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) {
			return dummy.New(log.With("manager", "dummy"), c)
		},
		Host: func(c *provisionerv1.HostConfig) (manager.Manager, error) {
			return hostdev.New(log.With("manager", "host"), cfg.SysfsRoot, c, hostdev.WithResync(cfg.Resync))
		},
	}
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	mover, err := link.NewMover(log.With("component", "link"))
	if err != nil {
		return err
	}
	defer mover.Close()
	svc := server.New(log, cfg.factories(log), mover)
	srv := rpc.NewServer(cfg.ServerConfig(log))
	provisionerv1.RegisterProvisionerServiceServer(srv.GRPC(), svc)
	srv.SetServing(provisionerv1.ProvisionerService_ServiceDesc.ServiceName, true)
	log.Info("Serving", "socket", cfg.Socket, "sysfs", cfg.SysfsRoot)
	// Closing the service first ends the watch streams and stops the
	// managers, so the graceful stop does not wait for them.
	return rpc.RunServer(ctx, log, srv, rpc.OnStop(svc.Close))
}
