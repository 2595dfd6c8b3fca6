package rpc

import (
	"context"
	"log/slog"
	"math/rand/v2"
	"time"
)

// retryPolicy paces Retry. Tests shrink it.
type retryPolicy struct {
	base, max time.Duration
	// resetAfter is how long a run must last to count as healthy, so that
	// the next failure starts again from base.
	resetAfter time.Duration
	// quietFailures is how many consecutive failures log at Info before
	// they log at Warn.
	quietFailures int
	// wait sleeps for about d or until ctx is done.
	wait func(ctx context.Context, d time.Duration) error
}

var defaultRetryPolicy = retryPolicy{
	base:          100 * time.Millisecond,
	max:           5 * time.Second,
	resetAfter:    5 * time.Second,
	quietFailures: 3,
	wait:          jitteredSleep,
}

// Retry runs fn until ctx is done and then returns ctx.Err().
//
// fn is run again whenever it returns, with an exponential backoff (100ms
// doubling up to 5s, jittered) between consecutive short runs; a run lasting
// over 5s resets the backoff. This is how a client keeps a watch stream open
// across server restarts: fn opens the stream and consumes it, returning
// when it breaks. Each return of fn while ctx is live is logged with what,
// at Info for the first few consecutive failures and at Warn after.
func Retry(ctx context.Context, log *slog.Logger, what string, fn func(ctx context.Context) error) error {
	return defaultRetryPolicy.run(ctx, log, what, fn)
}

func (p retryPolicy) run(ctx context.Context, log *slog.Logger, what string, fn func(ctx context.Context) error) error {
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		err := fn(ctx)
		if ctx.Err() != nil {
			break
		}
		if time.Since(start) > p.resetAfter {
			failures = 0
		}
		failures++
		delay := p.delay(failures)
		lvl := slog.LevelInfo
		if failures > p.quietFailures {
			lvl = slog.LevelWarn
		}
		log.Log(ctx, lvl, "Retrying", "what", what, "error", err, "failures", failures, "delay", delay)
		if p.wait(ctx, delay) != nil {
			break
		}
	}
	return ctx.Err()
}

// delay is the backoff before the run following the n-th (n ≥ 1) consecutive
// failure: base·2^(n-1), capped at max.
func (p retryPolicy) delay(n int) time.Duration {
	d := p.base
	for i := 1; i < n && d < p.max; i++ {
		d *= 2
	}
	return min(d, p.max)
}

// jitteredSleep sleeps for a random duration in [0.8d, d], so that clients
// of a restarted server do not reconnect in lockstep, or until ctx is done.
func jitteredSleep(ctx context.Context, d time.Duration) error {
	d -= time.Duration(rand.Int64N(int64(d)/5 + 1))
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
