package rpc

import (
	"context"
	"errors"
	"log/slog"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/util/wait"
)

// levelRecorder is a slog.Handler that records the level of each record.
type levelRecorder struct {
	mu     sync.Mutex
	levels []slog.Level
}

func (r *levelRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *levelRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *levelRecorder) WithGroup(string) slog.Handler            { return r }
func (r *levelRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.levels = append(r.levels, rec.Level)
	return nil
}

func TestRetryBackoff(t *testing.T) {
	const ms = time.Millisecond
	errBroken := errors.New("stream broken")
	tests := []struct {
		name string
		// run is fn's behaviour on its n-th (1-based) run.
		run        func(ctx context.Context, n int) error
		resetAfter time.Duration
		runs       int
		wantWaits  []time.Duration
		wantLevels []slog.Level
	}{
		{
			name:       "failures back off up to the cap",
			run:        func(context.Context, int) error { return errBroken },
			resetAfter: time.Hour,
			runs:       6,
			wantWaits:  []time.Duration{1 * ms, 2 * ms, 4 * ms, 8 * ms, 10 * ms, 10 * ms},
			wantLevels: []slog.Level{slog.LevelInfo, slog.LevelInfo, slog.LevelWarn, slog.LevelWarn, slog.LevelWarn, slog.LevelWarn},
		},
		{
			name: "a long run resets the backoff",
			run: func(ctx context.Context, n int) error {
				if n == 4 {
					time.Sleep(100 * ms) // a healthy, long-lived stream
				}
				return errBroken
			},
			resetAfter: 50 * ms,
			runs:       6,
			wantWaits:  []time.Duration{1 * ms, 2 * ms, 4 * ms, 1 * ms, 2 * ms, 4 * ms},
			wantLevels: []slog.Level{slog.LevelInfo, slog.LevelInfo, slog.LevelWarn, slog.LevelInfo, slog.LevelInfo, slog.LevelWarn},
		},
		{
			name:       "clean ends are retried too",
			run:        func(context.Context, int) error { return nil },
			resetAfter: time.Hour,
			runs:       3,
			wantWaits:  []time.Duration{1 * ms, 2 * ms, 4 * ms},
			wantLevels: []slog.Level{slog.LevelInfo, slog.LevelInfo, slog.LevelWarn},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var waits []time.Duration
			p := retryPolicy{
				backoff:       wait.Backoff{Duration: 1 * ms, Factor: 2, Steps: math.MaxInt32, Cap: 10 * ms},
				resetAfter:    tt.resetAfter,
				quietFailures: 2,
				// Record instead of sleeping; stop after the wanted runs.
				sleep: func(ctx context.Context, d time.Duration) error {
					waits = append(waits, d)
					if len(waits) == tt.runs {
						cancel()
					}
					return ctx.Err()
				},
			}
			rec := &levelRecorder{}
			runs := 0
			err := p.run(ctx, slog.New(rec), "test watch", func(ctx context.Context) error {
				runs++
				return tt.run(ctx, runs)
			})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("run returned %v, want context.Canceled", err)
			}
			if runs != tt.runs {
				t.Errorf("fn ran %d times, want %d", runs, tt.runs)
			}
			if diff := cmp.Diff(tt.wantWaits, waits); diff != "" {
				t.Errorf("waits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantLevels, rec.levels); diff != "" {
				t.Errorf("log levels (-want +got):\n%s", diff)
			}
		})
	}
}

// TestRetryDelay: the default waits double from 100ms to 5s, each at most a
// fifth longer than that.
func TestRetryDelay(t *testing.T) {
	b := defaultRetryPolicy.backoff
	base := []time.Duration{
		100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 5 * time.Second, 5 * time.Second, 5 * time.Second,
	}
	for i, want := range base {
		if got := b.Step(); got < want || got > want+want/5 {
			t.Errorf("wait %d = %v, want %v to %v", i+1, got, want, want+want/5)
		}
	}
}

func TestRetryStopsWithContext(t *testing.T) {
	tests := []struct {
		name      string
		cancelled bool          // ctx is cancelled before Retry
		timeout   time.Duration // ctx deadline, if any
		// fn is the run; nil means it must not run.
		fn       func(ctx context.Context, cancel context.CancelFunc) error
		wantRuns int // 0 means at least one when fn is set
		wantErr  error
	}{
		{
			name:      "already cancelled",
			cancelled: true,
			wantErr:   context.Canceled,
		},
		{
			name: "cancelled while fn runs",
			fn: func(ctx context.Context, cancel context.CancelFunc) error {
				cancel()
				<-ctx.Done()
				return ctx.Err()
			},
			wantRuns: 1,
			wantErr:  context.Canceled,
		},
		{
			name:    "deadline while waiting",
			timeout: 300 * time.Millisecond,
			fn:      func(context.Context, context.CancelFunc) error { return errors.New("unavailable") },
			wantErr: context.DeadlineExceeded,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			if tt.timeout > 0 {
				ctx, cancel = context.WithTimeout(context.Background(), tt.timeout)
			}
			defer cancel()
			if tt.cancelled {
				cancel()
			}
			runs := 0
			err := Retry(ctx, testLogger(t), "test watch", func(ctx context.Context) error {
				runs++
				if tt.fn == nil {
					t.Error("fn ran")
					return nil
				}
				return tt.fn(ctx, cancel)
			})
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Retry returned %v, want %v", err, tt.wantErr)
			}
			switch {
			case tt.wantRuns > 0 && runs != tt.wantRuns:
				t.Errorf("fn ran %d times, want %d", runs, tt.wantRuns)
			case tt.fn != nil && runs == 0:
				t.Error("fn never ran")
			}
		})
	}
}
