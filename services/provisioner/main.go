// Command provisioner is netdra's only privileged process: it discovers
// devices (sysfs, netlink), provisions SR-IOV VFs, sets devices up for claims
// and moves them into pods and back. It serves
// netdra.provisioner.v1.ProvisionerService on a unix socket and holds no
// Kubernetes credentials: dra and nri tell it what to do.
package main

import (
	"cmp"
	"context"
	"flag"
	"log/slog"
	"os"
	"time"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/dummy"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/server"
	"github.com/netdra/netdra/services/provisioner/sriov"
	"github.com/netdra/netdra/services/provisioner/subif"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/process/metrics"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	// SysfsRoot is where the host's /sys is mounted (/host/sys in a pod).
	SysfsRoot string
	// DevRoot is where the host's device nodes are, as the container
	// runtime sees them: the host paths of the device nodes a prepared
	// device names (a vfio VF's /dev/vfio/<group>, an RDMA device's
	// /dev/infiniband nodes) are under it. The provisioner never opens them.
	DevRoot string
	// Resync is how often the managers rediscover besides link events.
	Resync time.Duration
	// BPFFS is where the provisioner mounts a bpffs (if none is there) and
	// pins its eBPF programs; "" runs without them.
	BPFFS string
	// NetnsPinDir is where the pod namespaces of attached devices are
	// pinned (bind mounts), so that a restarted provisioner can still take
	// a device back from a pod the runtime tore down meanwhile; "" keeps
	// them in memory only. In a pod it must be a hostPath mounted with
	// mountPropagation Bidirectional, or the pins stay in the container's
	// mount namespace and go with it.
	NetnsPinDir string
	// Metrics is where Prometheus metrics are served; empty for none.
	Metrics string
	handoff *ebpf.Handoff
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("provisioner", flag.ContinueOnError)
	cfg.Register(fs, "provisioner")
	fs.StringVar(&cfg.SysfsRoot, "sysfs-root", "/sys", "where the host's sysfs is mounted")
	fs.StringVar(&cfg.DevRoot, "dev-root", sriov.DefaultDevRoot, "where the host's device nodes are, as the container runtime sees them (vfio, infiniband); never opened")
	fs.DurationVar(&cfg.Resync, "resync", 30*time.Second, "how often device managers rediscover, besides link events")
	fs.StringVar(&cfg.BPFFS, "bpffs", ebpf.DefaultBPFFS, "where to mount a bpffs (if none is there) and pin the eBPF programs on devices; empty: no eBPF (no counters, software VLAN, spoof check or hand-off)")
	fs.StringVar(&cfg.NetnsPinDir, "netns-pin-dir", "", "where to pin the pod netns of attached devices, and keep their DHCP leases, so a restarted provisioner can take them back; empty: memory only")
	fs.StringVar(&cfg.Metrics, "metrics-address", "127.0.0.1:9654", "where to serve Prometheus metrics (empty: nowhere)")
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, cfg.run))
}

// factories builds the managers; the host netns is the process's own, the
// sysfs root the one Configure names, else -sysfs-root.
func (cfg *config) factories(log *slog.Logger) server.Factories {
	root := func(r string) string { return cmp.Or(r, cfg.SysfsRoot) }
	return server.Factories{
		Sriov: func(sysfsRoot string, c *provisionerv1.SriovConfig, prepared server.PreparedVFs, report func([]string)) (manager.Manager, error) {
			return sriov.New(log.With("manager", "sr-iov", "sysfs", root(sysfsRoot)), root(sysfsRoot), c,
				sriov.WithResync(cfg.Resync), sriov.WithDevRoot(cfg.DevRoot), sriov.WithPrepared(prepared), sriov.WithReport(report))
		},
		Dummy: func(c *provisionerv1.DummyConfig) (manager.Manager, error) {
			return dummy.New(log.With("manager", "dummy"), c)
		},
		Subif: func(c *provisionerv1.SubifConfig) (manager.Manager, error) {
			return subif.New(log.With("manager", "subif"), c, subif.WithResync(cfg.Resync))
		},
		Host: func(sysfsRoot string, c *provisionerv1.HostConfig) (manager.Manager, error) {
			opts := []hostdev.Option{hostdev.WithResync(cfg.Resync), hostdev.WithDevRoot(cfg.DevRoot)}
			if cfg.handoff != nil {
				opts = append(opts, hostdev.WithHandoff(cfg.handoff))
			}
			return hostdev.New(log.With("manager", "host", "sysfs", root(sysfsRoot)), root(sysfsRoot), c, opts...)
		},
	}
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	var moverOpts []link.Option
	if cfg.NetnsPinDir != "" {
		// The DHCP leases outlive the provisioner as the pins do.
		moverOpts = append(moverOpts, link.WithLeaseDir(server.LeaseDir(cfg.NetnsPinDir)))
	}
	mover, err := link.NewMover(log.With("component", "link"), moverOpts...)
	if err != nil {
		return err
	}
	defer mover.Close()
	var programs *ebpf.Programs
	if cfg.BPFFS != "" {
		if programs, err = ebpf.New(log.With("component", "ebpf"), cfg.BPFFS); err != nil {
			return err
		}
		defer programs.Close()
		if cfg.handoff, err = ebpf.NewHandoff(log.With("component", "ebpf"), cfg.BPFFS); err != nil {
			return err
		}
	}
	svc := server.New(log, cfg.factories(log), mover)
	if programs != nil {
		svc.SetPrograms(programs, programs)
		svc.SetSweeper(programs)
	}
	if cfg.NetnsPinDir != "" {
		if err := svc.UseNetnsPins(ctx, cfg.NetnsPinDir); err != nil {
			return err
		}
	}
	reg := metrics.NewRegistry()
	serveMetrics, err := metrics.Serve(cfg.Metrics, reg, log)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(metrics.NewGRPC(reg).Server(cfg.ServerConfig(log)))
	provisionerv1.RegisterProvisionerServiceServer(srv.GRPC(), svc)
	srv.SetServing(provisionerv1.ProvisionerService_ServiceDesc.ServiceName, true)
	log.Info("Serving", "socket", cfg.Socket, "sysfs", cfg.SysfsRoot, "metrics", cfg.Metrics)
	// Closing the service first ends the watch streams and stops the
	// managers, so the graceful stop does not wait for them.
	err = process.RunServer(ctx, log, srv, process.OnStop(svc.Close), serveMetrics)
	svc.Wait() // the eBPF work Setup and Free left running, before the programs close
	if programs != nil {
		cfg.tidy(ctx, log, svc, programs)
	}
	return err
}

// stopSweepWait bounds the sweep at a clean stop.
const stopSweepWait = 10 * time.Second

// tidy is the clean stop's last step: netdra's eBPF programs off what no
// allocation holds (server.Sweep), then the empty directories of the
// bpffs removed; what devices still hold stays pinned for the next start.
func (cfg *config) tidy(ctx context.Context, log *slog.Logger, svc *server.Server, programs *ebpf.Programs) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopSweepWait)
	defer cancel()
	svc.Sweep(sctx)
	for _, tidy := range []func() error{programs.Tidy, cfg.handoff.Tidy} {
		if err := tidy(); err != nil {
			log.Warn("bpffs not tidied", "error", err)
		}
	}
}
