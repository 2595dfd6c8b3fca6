package node

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"

	nrilog "github.com/containerd/nri/pkg/log"
)

// The NRI library logs through one process-wide logger. It is pointed once
// at nriLogger, which writes to the logger of the node started last; the
// library's chatty info lines go out at debug level.
var (
	nriLogOnce sync.Once
	nriSlog    atomic.Pointer[slog.Logger]
)

func setNRILogger(l *slog.Logger) {
	nriSlog.Store(l.With("component", "nri"))
	nriLogOnce.Do(func() { nrilog.Set(nriLogger{}) })
}

type nriLogger struct{}

func (nriLogger) logf(ctx context.Context, level slog.Level, format string, args []any) {
	l := nriSlog.Load()
	if l == nil || !l.Enabled(ctx, level) {
		return
	}
	l.Log(ctx, level, fmt.Sprintf(format, args...))
}

func (g nriLogger) Debugf(ctx context.Context, format string, args ...any) {
	g.logf(ctx, slog.LevelDebug-4, format, args)
}

func (g nriLogger) Infof(ctx context.Context, format string, args ...any) {
	g.logf(ctx, slog.LevelDebug, format, args)
}

func (g nriLogger) Warnf(ctx context.Context, format string, args ...any) {
	level := slog.LevelWarn
	// The stub warns that it cannot map the runtime "testworld" to an NRI
	// version; in test binaries, which carry no module versions, the
	// adaptation cannot tell its own either. Both are expected here.
	if strings.HasPrefix(format, "failed to infer runtime NRI version") {
		level = slog.LevelDebug
	}
	g.logf(ctx, level, format, args)
}

func (g nriLogger) Errorf(ctx context.Context, format string, args ...any) {
	g.logf(ctx, slog.LevelError, format, args)
}
