package manager

import (
	"fmt"
	"time"
)

// Debounce bounds of the managers' rescans on link events
// (debounce.Wait): a rescan waits until no event came for RescanQuiet, or
// at most RescanMax after the first one. A namespace move makes several
// link events (down, MAC, MTU, rename, the move itself), and a burst of
// pods makes many: one rescan covers them all, so that a rescan (a dump
// of every link, which holds the kernel's RTNL lock that the moves need
// too) does not run once per event while the pods' devices move.
const (
	RescanQuiet = 50 * time.Millisecond
	RescanMax   = 500 * time.Millisecond
)

// RescanMaxAfter is the longest a rescan waits for a burst to end after a
// scan that took took: RescanMax, or four times took when that is longer,
// so that under a steady stream of events the rescans of a large
// inventory take at most a fifth of the time.
func RescanMaxAfter(took time.Duration) time.Duration {
	return max(RescanMax, 4*took)
}

// CheckResync checks a manager's resync interval (how often it rescans
// without an event): it must be positive.
func CheckResync(d time.Duration) error {
	if d <= 0 {
		return fmt.Errorf("resync interval %v is not positive", d)
	}
	return nil
}
