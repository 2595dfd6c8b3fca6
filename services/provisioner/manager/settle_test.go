package manager

import (
	"context"
	"testing"
	"time"
)

// TestSettle: Settle takes in the events of a burst (one rescan covers
// them), reports a closed channel, and returns when its context ends.
func TestSettle(t *testing.T) {
	ch := make(chan int, 8)
	for i := range 5 {
		ch <- i
	}
	if !Settle(t.Context(), ch, time.Millisecond, time.Hour) {
		t.Error("Settle on an open channel returned false")
	}
	if n := len(ch); n != 0 {
		t.Errorf("%d events of the burst left queued, want 0", n)
	}

	ch <- 1
	close(ch)
	if Settle(t.Context(), ch, time.Hour, time.Hour) {
		t.Error("Settle on a closed channel returned true")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !Settle(ctx, make(chan int), time.Hour, time.Hour) {
		t.Error("Settle with an ended context returned false")
	}
}

func TestSettleMaxAfter(t *testing.T) {
	for _, tc := range []struct{ took, want time.Duration }{
		{0, SettleMax},
		{SettleMax / 4, SettleMax},
		{time.Second, 4 * time.Second},
	} {
		if got := SettleMaxAfter(tc.took); got != tc.want {
			t.Errorf("SettleMaxAfter(%v) = %v, want %v", tc.took, got, tc.want)
		}
	}
}
