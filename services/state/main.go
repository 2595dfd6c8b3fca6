// Command state is netdra's state service: the node's device inventory and
// allocations, served as netdra.state.v1.StateService on a unix socket, the
// allocations kept durably in a bbolt file. It needs no privileges.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/state/api"
	"github.com/netdra/netdra/services/state/store"
	"github.com/netdra/netdra/shared/process"
	"github.com/netdra/netdra/shared/rpc"
)

type config struct {
	process.Flags
	// DB is the bbolt file the allocations are written through to.
	DB string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("state", flag.ContinueOnError)
	cfg.Register(fs, "state")
	fs.StringVar(&cfg.DB, "db", "/var/lib/netdra/state.db", "bbolt file holding the allocations")
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
	srv := rpc.NewServer(cfg.ServerConfig(log))
	statev1.RegisterStateServiceServer(srv.GRPC(), api.New(st))
	srv.SetServing(statev1.StateService_ServiceDesc.ServiceName, true)
	log.Info("Serving", "socket", cfg.Socket, "db", cfg.DB)
	// Closing the store first ends the watch streams, so the graceful stop
	// does not wait for them.
	return process.RunServer(ctx, log, srv, process.OnStop(func() { _ = st.Close() }))
}
