// Command state is netdra's state service: the node's device inventory and
// allocations, served as netdra.state.v1.StateService on a unix socket, the
// allocations kept durably in a bbolt file. It needs no privileges.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/process/metrics"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	// DB is the bbolt file the allocations are written through to.
	DB string
	// Metrics is where Prometheus metrics are served; empty for none.
	Metrics string
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "init-dir" {
		os.Exit(initDir(os.Args[2:], os.Stderr))
	}
	var cfg config
	fs := flag.NewFlagSet("state", flag.ContinueOnError)
	cfg.Register(fs, "state")
	cfg.Inspect = func(ctx context.Context, cc *grpc.ClientConn) (proto.Message, error) {
		return statev1.NewStateServiceClient(cc).Dump(ctx, &statev1.DumpRequest{})
	}
	fs.StringVar(&cfg.DB, "db", "/var/lib/netdra/state.db", "bbolt file holding the allocations")
	fs.StringVar(&cfg.Metrics, "metrics-address", "127.0.0.1:9653", "where to serve Prometheus metrics (empty: nowhere)")
	// The state file is the node's one lock every release of the state
	// service takes: the next node pod's stands by until it is free.
	cfg.TakeOver.Ready = func() (bool, string, error) {
		free, err := store.Free(cfg.DB)
		return free, "another state service holds " + cfg.DB + ": the previous node pod's, in a roll; this one takes over when it exits", err
	}
	os.Exit(process.Main(fs, os.Args[1:], &cfg.Flags, cfg.run))
}

func (cfg *config) run(ctx context.Context, log *slog.Logger) error {
	if err := os.MkdirAll(filepath.Dir(cfg.DB), 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	st, err := store.Open(cfg.DB, log)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := metrics.NewRegistry()
	reg.MustRegister(store.NewCollector(st))
	serveMetrics, err := metrics.Serve(cfg.Metrics, reg, log)
	if err != nil {
		return err
	}
	srv := rpc.NewServer(metrics.NewGRPC(reg).Server(cfg.ServerConfig(log)))
	statev1.RegisterStateServiceServer(srv.GRPC(), api.New(st))
	srv.SetServing(statev1.StateService_ServiceDesc.ServiceName, true)
	log.Info("Serving", "socket", cfg.Socket, "db", cfg.DB, "metrics", cfg.Metrics)
	// Closing the store first ends the watch streams, so the graceful stop
	// does not wait for them.
	return process.RunServer(ctx, log, srv, process.OnStop(func() { _ = st.Close() }), serveMetrics)
}

// initDir is `state init-dir [-db FILE] [-group GID] [-socket-dir DIR]`, the node pod's init
// container: the kubelet creates the state directory's hostPath root:root
// 0755, and the state service runs as 65532. Run as the directory's owner
// (uid 0, no capability needed: chgrp to one of the caller's groups and
// chmod are the owner's rights), it gives the directory to the group (the
// pod's fsGroup, one of the caller's groups) with mode 2770. With
// -socket-dir it also takes the world's bits off the sockets' emptyDir
// (created 2777 by the kubelet; every process refuses to listen in a
// world-writable directory): 2770, as its owner. It is in the state image,
// so the node pod needs no image but netdra's.
func initDir(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("state init-dir", flag.ContinueOnError)
	db := fs.String("db", "/var/lib/netdra/state.db", "the bbolt file whose directory to prepare")
	gid := fs.Int("group", 65532, "the group the state service runs in (the pod's fsGroup)")
	sockets := fs.String("socket-dir", "", "the sockets' directory to make 2770 (empty: none)")
	if code, ok := process.ParseArgs(fs, args, stderr); !ok {
		return code
	}
	if err := prepareDir(filepath.Dir(*db), *gid); err != nil {
		fmt.Fprintf(stderr, "state init-dir: %v\n", err)
		return 1
	}
	if *sockets != "" {
		if err := os.Chmod(*sockets, 0o770|os.ModeSetgid); err != nil {
			fmt.Fprintf(stderr, "state init-dir: sockets' directory: %v\n", err)
			return 1
		}
	}
	return 0
}

func prepareDir(dir string, gid int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("state directory: %w", err)
	}
	if err := os.Chown(dir, -1, gid); err != nil {
		return fmt.Errorf("state directory %s to group %d (run as its owner, in that group): %w", dir, gid, err)
	}
	if err := os.Chmod(dir, 0o770|os.ModeSetgid); err != nil {
		return fmt.Errorf("state directory %s: %w", dir, err)
	}
	return nil
}
