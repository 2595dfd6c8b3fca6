package process

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"google.golang.org/grpc/grpclog"
)

// LogFormat is how a process writes its log lines: "json" (one JSON object
// a line, the default, for a node's log collector) or "text" (slog's
// key=value lines, for a person reading a terminal).
type LogFormat string

// The log formats.
const (
	LogJSON LogFormat = "json"
	LogText LogFormat = "text"
)

// UnmarshalText accepts "json" and "text" and refuses anything else.
func (f *LogFormat) UnmarshalText(b []byte) error {
	switch v := LogFormat(strings.ToLower(string(b))); v {
	case LogJSON, LogText:
		*f = v
		return nil
	}
	return fmt.Errorf("unknown log format %q: json or text", b)
}

// MarshalText returns the format's name.
func (f LogFormat) MarshalText() ([]byte, error) { return []byte(f), nil }

// NewLogger returns the logger every netdra process logs through: records
// at level and above, written to w in format.
func NewLogger(w io.Writer, level slog.Leveler, format LogFormat) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if format == LogText {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// RouteGRPCLogs sends grpc-go's own log lines through log, so that a
// process writes one format only: grpc's informational lines (connection
// state, name resolution) at debug, its warnings and errors at theirs. It
// must be called before any gRPC call or server is made (grpclog's rule).
func RouteGRPCLogs(log *slog.Logger) {
	grpclog.SetLoggerV2(grpcLogger{log.With("component", "grpc")})
}

// grpcLogger is grpclog.LoggerV2 over slog.
type grpcLogger struct{ log *slog.Logger }

func (g grpcLogger) Info(args ...any)                 { g.log.Debug(fmt.Sprint(args...)) }
func (g grpcLogger) Infoln(args ...any)               { g.log.Debug(sprintln(args)) }
func (g grpcLogger) Infof(format string, args ...any) { g.log.Debug(fmt.Sprintf(format, args...)) }
func (g grpcLogger) Warning(args ...any)              { g.log.Warn(fmt.Sprint(args...)) }
func (g grpcLogger) Warningln(args ...any)            { g.log.Warn(sprintln(args)) }
func (g grpcLogger) Warningf(format string, args ...any) {
	g.log.Warn(fmt.Sprintf(format, args...))
}
func (g grpcLogger) Error(args ...any)                 { g.log.Error(fmt.Sprint(args...)) }
func (g grpcLogger) Errorln(args ...any)               { g.log.Error(sprintln(args)) }
func (g grpcLogger) Errorf(format string, args ...any) { g.log.Error(fmt.Sprintf(format, args...)) }

// Fatal logs at error; grpc-go then exits the process itself.
func (g grpcLogger) Fatal(args ...any)                 { g.log.Error(fmt.Sprint(args...)) }
func (g grpcLogger) Fatalln(args ...any)               { g.log.Error(sprintln(args)) }
func (g grpcLogger) Fatalf(format string, args ...any) { g.log.Error(fmt.Sprintf(format, args...)) }

// V reports whether grpc's verbosity level l is logged: level 0 (its
// informational lines) when debug is on, none above (grpc's verbose
// tracing, which GRPC_GO_LOG_VERBOSITY_LEVEL is for).
func (g grpcLogger) V(l int) bool {
	return l == 0 && g.log.Enabled(context.Background(), slog.LevelDebug)
}

func sprintln(args []any) string { return strings.TrimSuffix(fmt.Sprintln(args...), "\n") }
