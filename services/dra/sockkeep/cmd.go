package sockkeep

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/netdra/netdra/shared/process"
)

// DefaultSocket is the holder's handover socket by default: the path the
// chart gives it, in a host directory that the holder's pod and the node
// pod both mount (the holder is in a DaemonSet of its own).
const DefaultSocket = "/run/netdra-holder/dra-sockets.sock"

// Main is `dra sockets [flags]`: the holder, serving its handover socket
// (once the holder it replaces, if any, has left it) until SIGINT or
// SIGTERM, then closing the held sockets and removing their files. It
// returns the exit code: 0 after a signal, 1 on an error, 2 on bad flags. `dra sockets health [-socket]` instead asks the holder
// which sockets it holds (for exec probes): 0 when it answered, 1 when
// not.
func Main(args []string, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "health" {
		return health(args[1:], stderr)
	}
	fs := flag.NewFlagSet("dra sockets", flag.ContinueOnError)
	socket := fs.String("socket", DefaultSocket, "unix socket dra takes the held kubelet sockets from (dra's -keep-sockets)")
	var allowed process.UIDList
	fs.Var(&allowed, "allowed-uids", "comma-separated peer uids the sockets are handed to (default: own uid and root)")
	var level slog.Level
	fs.TextVar(&level, "log-level", slog.LevelInfo, "minimum log level: debug, info, warn, error")
	format := process.LogJSON
	fs.TextVar(&format, "log-format", process.LogJSON, "log line format: json or text")
	if code, ok := process.ParseArgs(fs, args, stderr); !ok {
		return code
	}
	log := process.NewLogger(stderr, level, format)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	h := NewHolder(log, allowed)
	err := h.Serve(ctx, *socket)
	held := h.Held()
	h.Close()
	if err != nil {
		log.Error("Exiting", "error", err)
		return 1
	}
	log.Info("Shut down; the held sockets are closed and removed", "sockets", held)
	return 0
}

// healthTimeout bounds a health check, under the probes' timeout.
const healthTimeout = 5 * time.Second

func health(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("dra sockets health", flag.ContinueOnError)
	socket := fs.String("socket", DefaultSocket, "the holder's handover socket")
	if code, ok := process.ParseArgs(fs, args, stderr); !ok {
		return code
	}
	ctx, cancel := context.WithTimeout(context.Background(), healthTimeout)
	defer cancel()
	if _, err := Held(ctx, *socket); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}
