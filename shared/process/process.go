// Package process is the common shape of netdra's node processes: the flags
// every one of them has (its socket, the peer uid allow-list, the log
// level, and for dra and nri the sockets of the processes they call), a
// `health` subcommand for exec probes, and turning the flags and the run
// function's result into an exit code (ParseArgs, which the operator uses
// too), and its lifetime as an oklog/run group: [RunServer] serves the
// process's rpc.Server beside its other actors until a signal. Mains stay
// thin: flags into a config struct, wiring, and RunServer.
package process

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/netdra/netdra/shared/process/args"
	"github.com/netdra/netdra/shared/rpc"
)

// SocketDir is where the node processes' sockets live by default.
const SocketDir = "/run/netdra"

// Flags are the flags every node process has.
type Flags struct {
	// Socket is the unix socket the process serves on.
	Socket string
	// AllowedUIDs are the peer uids allowed to call; empty means the
	// process's own uid and root.
	AllowedUIDs UIDList
	// LogLevel is the minimum level logged.
	LogLevel slog.Level
	// LogFormat is the log lines' format (NewLogger).
	LogFormat LogFormat
	// MemoryLimit is the Go runtime's soft memory limit (0: none); the
	// default is the process's in MemoryLimits.
	MemoryLimit ByteSize
	// GCPercent is the Go runtime's GC target percentage (GOGC): the
	// heap grows by this percentage of what it holds before the next
	// collection; negative turns the collector off (then only a memory
	// limit starts one).
	GCPercent int
	// TakeOver is when the process may start its work on the node: at
	// once, or after standing by for its predecessor (see TakeOver).
	TakeOver TakeOver
	// Inspect, when set, is the process's read-only status call that
	// `<process> inspect` prints beside its health and version.
	Inspect Inspector
	// name is the process's name, as Register was given it.
	name string
}

// Register adds the common flags to fs, the socket defaulting to
// /run/netdra/<name>.sock.
func (f *Flags) Register(fs *flag.FlagSet, name string) {
	f.name = name
	fs.StringVar(&f.Socket, "socket", SocketDir+"/"+name+".sock", "unix socket to serve gRPC on")
	fs.Var(&f.AllowedUIDs, "allowed-uids", "comma-separated peer uids allowed to call (default: own uid and root)")
	fs.TextVar(&f.LogLevel, "log-level", slog.LevelInfo, "minimum log level: debug, info, warn, error")
	fs.TextVar(&f.LogFormat, "log-format", LogJSON, "log line format: json or text")
	f.MemoryLimit = MemoryLimits[name]
	fs.Var(&f.MemoryLimit, "memory-limit", "the Go runtime's soft memory limit (GOMEMLIMIT), e.g. 12MiB; 0: none. Unset, $GOMEMLIMIT wins over the default")
	fs.IntVar(&f.GCPercent, "gc-percent", DefaultGCPercent, "the Go runtime's GC target percentage (GOGC): how much the heap grows over what it holds before a collection; negative: off. Unset, $GOGC wins over the default")
	f.TakeOver.Register(fs)
}

// ServerConfig returns the rpc server configuration the flags describe.
func (f *Flags) ServerConfig(log *slog.Logger) rpc.ServerConfig {
	return rpc.ServerConfig{SocketPath: f.Socket, AllowedUIDs: f.AllowedUIDs, Logger: log}
}

// ParseArgs parses args into fs, which writes its errors and usage to
// stderr, and refuses arguments left over (args.Parse). ok says the
// process goes on; otherwise code is its exit code: 0 after -help, 2 for
// bad flags or arguments.
func ParseArgs(fs *flag.FlagSet, argv []string, stderr io.Writer) (code int, ok bool) {
	return args.Parse(fs, argv, stderr)
}

// Main parses args into fs and runs run with a logger writing to stderr
// (NewLogger, grpc-go's own lines routed through it), returning the exit code: 0 on a clean shutdown, 1 on an error, 2
// on bad flags. `<process> health [flags]` instead asks the socket's health
// service and exits 0 when it is SERVING (for exec probes); `<process>
// inspect [flags]` prints a Report as JSON (its health, version and the
// Inspect call's reply) and exits 0 when both were read.
func Main(fs *flag.FlagSet, args []string, f *Flags, run func(ctx context.Context, log *slog.Logger) error) int {
	return mainWith(fs, args, f, os.Stdout, os.Stderr, run)
}

func mainWith(fs *flag.FlagSet, args []string, f *Flags, stdout, stderr io.Writer, run func(ctx context.Context, log *slog.Logger) error) int {
	var sub string
	if len(args) > 0 && (args[0] == "health" || args[0] == "inspect") {
		sub, args = args[0], args[1:]
	}
	health := sub == "health"
	if code, ok := ParseArgs(fs, args, stderr); !ok {
		return code
	}
	if sub == "inspect" {
		return inspect(context.Background(), f.name, f.Socket, f.Inspect, stdout)
	}
	if health {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rpc.CheckHealth(ctx, f.Socket, ""); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", f.Socket, err)
			return 1
		}
		return 0
	}
	given := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })
	applyMemoryLimit(f.MemoryLimit, given["memory-limit"])
	applyGCPercent(f.GCPercent, given["gc-percent"])
	log := NewLogger(stderr, f.LogLevel, f.LogFormat)
	RouteGRPCLogs(log)
	release, err := f.TakeOver.StandBy(context.Background(), log, f.ServerConfig(log))
	if errors.Is(err, errStoppedStandingBy) {
		log.Info("Shut down", "reason", err)
		return 0
	}
	if err != nil {
		log.Error("Exiting", "error", err)
		return 1
	}
	defer release()
	if err := run(context.Background(), log); err != nil {
		log.Error("Exiting", "error", err)
		return 1
	}
	return 0
}
