package debounce

import (
	"context"
	"testing"
	"time"
)

// TestWait: Settle takes in the events of a burst (one rescan covers
// them), reports a closed channel, and returns when its context ends.
func TestWait(t *testing.T) {
	ch := make(chan int, 8)
	for i := range 5 {
		ch <- i
	}
	if !Wait(t.Context(), ch, time.Millisecond, time.Hour) {
		t.Error("Settle on an open channel returned false")
	}
	if n := len(ch); n != 0 {
		t.Errorf("%d events of the burst left queued, want 0", n)
	}

	ch <- 1
	close(ch)
	if Wait(t.Context(), ch, time.Hour, time.Hour) {
		t.Error("Settle on a closed channel returned true")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !Wait(ctx, make(chan int), time.Hour, time.Hour) {
		t.Error("Settle with an ended context returned false")
	}
}

func TestMaxAfter(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, Max},
		{Max / 4, Max},
		{time.Second, 4 * time.Second},
	} {
		if got := MaxAfter(tc.took); got != tc.want {
			t.Errorf("MaxAfter(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
