// Package debounce debounces the device managers' rescans on link events: one
// rescan for a burst of events, not one per event.
package debounce

import (
	"context"
	"fmt"
	"time"
)

// Debounce bounds of the managers' rescans on link events: a rescan waits
// until no event came for Quiet, or at most Max after the
// first one. A namespace move makes several link events (down, MAC, MTU,
// rename, the move itself), and a burst of pods makes many: one rescan
// covers them all, so that a rescan (a dump of every link, which holds the
// kernel's RTNL lock that the moves need too) does not run once per
// event while the pods' devices move.
const (
	Quiet = 50 * time.Millisecond
	Max   = 500 * time.Millisecond
)

// MaxAfter is the longest a rescan waits for a burst to end after a
// scan that took took: Max, or four times took when that is longer,
// so that under a steady stream of events the rescans of a large
// inventory take at most a fifth of the time.
func MaxAfter(took time.Duration) time.Duration {
	return max(Max, 4*took)
}

// Wait is called after a first event came on ch: it consumes the events
// that follow until none came for quiet, or max has passed since Wait
// was called, or ctx ends. It returns false when ch was closed (the caller
// then renews its subscription; the events it had count as seen).
func Wait[T any](ctx context.Context, ch <-chan T, quiet, max time.Duration) bool {
	end := time.NewTimer(max)
	defer end.Stop()
	idle := time.NewTimer(quiet)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-end.C:
			return true
		case <-idle.C:
			return true
		case _, ok := <-ch:
			if !ok {
				return false
			}
			idle.Reset(quiet)
		}
	}
}

// CheckResync checks a manager's resync interval (how often it rescans
// without an event): it must be positive.
func CheckResync(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("resync interval %v is not positive", d)
	}
	return nil
}
