// Package debounce gathers a burst of events into one run of the work
// they call for: the provisioner's device managers rescan once for a
// burst of link events, and dra publishes its ResourceSlices once for a
// burst of inventory and allocation changes.
package debounce

import (
	"context"
	"time"
)

// Due is when a burst of events is over: once the events paused for quiet
// after the latest, at last, or max after the first, at first, whichever
// is sooner; and never before floor, which bounds how often the work runs
// (a floor in the past, the zero time included, bounds nothing).
func Due(first, last, floor time.Time, quiet, max time.Duration) time.Time {
	at := last.Add(quiet)
	if ceiling := first.Add(max); ceiling.Before(at) {
		at = ceiling
	}
	if at.Before(floor) {
		at = floor
	}
	return at
}

// Wait is called after a first event came on ch: it consumes the events
// that follow until none came for quiet, or max has passed since Wait
// was called, or ctx ends. It returns false when ch was closed (the caller
// then renews its subscription; the events it had count as seen).
func Wait[T any](ctx context.Context, ch <-chan T, quiet, max time.Duration) bool {
	return WaitFloor(ctx, ch, quiet, max, time.Time{})
}

// WaitFloor is Wait that, besides, does not return before floor (Due)
// unless ch is closed or ctx ends; the events that come until then are
// consumed too.
func WaitFloor[T any](ctx context.Context, ch <-chan T, quiet, max time.Duration, floor time.Time) bool {
	first := time.Now()
	t := time.NewTimer(time.Until(Due(first, first, floor, quiet, max)))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-t.C:
			return true
		case _, ok := <-ch:
			if !ok {
				return false
			}
			t.Reset(time.Until(Due(first, time.Now(), floor, quiet, max)))
		}
	}
}
