package rpc

import (
	"context"
	"log/slog"
	"math"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// retryPolicy paces Retry. Tests shrink it.
type retryPolicy struct {
	// backoff is the sequence of waits between consecutive failures,
	// started again after a healthy run.
	backoff wait.Backoff
	// resetAfter is how long a run must last to count as healthy, so that
	// the next failure starts again from the backoff's first wait.
	resetAfter time.Duration
	// quietFailures is how many consecutive failures log at Info before
	// they log at Warn.
	quietFailures int
	// sleep sleeps for d or until ctx is done.
	sleep func(ctx context.Context, d time.Duration) error
}

var defaultRetryPolicy = retryPolicy{
	// Jitter, so that the clients of a restarted server do not reconnect
	// in lockstep.
	backoff:       wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Jitter: 0.2, Steps: math.MaxInt32, Cap: 5 * time.Second},
	resetAfter:    5 * time.Second,
	quietFailures: 3,
	sleep:         sleep,
}

// Retry runs fn until ctx is done and then returns ctx.Err().
//
// fn is run again whenever it returns, with an exponential backoff (100ms
// doubling up to 5s, each wait up to a fifth longer at random) between
// consecutive short runs; a run lasting over 5s resets the backoff. This is
// how a client keeps a watch stream open across server restarts: fn opens
// the stream and consumes it, returning when it breaks. Each return of fn
// while ctx is live is logged with what, at Info for the first few
// consecutive failures and at Warn after.
func Retry(ctx context.Context, log *slog.Logger, what string, fn func(ctx context.Context) error) error {
	return defaultRetryPolicy.run(ctx, log, what, fn)
}

func (p retryPolicy) run(ctx context.Context, log *slog.Logger, what string, fn func(ctx context.Context) error) error {
	failures := 0
	backoff := p.backoff
	for ctx.Err() == nil {
		start := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > p.resetAfter {
			failures, backoff = 0, p.backoff
		}
		failures++
		delay := backoff.Step()
		lvl := slog.LevelInfo
		if failures > p.quietFailures {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "Retrying", "what", what, "error", err, "failures", failures, "delay", delay)
		if p.sleep(ctx, delay) != nil {
			break
		}
	}
	return ctx.Err()
}

// sleep sleeps for d or until ctx is done, and then returns ctx.Err().
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
