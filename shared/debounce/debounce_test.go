package debounce

import (
	"context"
	"testing"
	"time"
)

// TestWait: Wait takes in the events of a burst (one run covers them),
// reports a closed channel, and returns when its context ends.
func TestWait(t *testing.T) {
	ch := make(chan int, 8)
	for i := range 5 {
		ch <- i
	}
	if !Wait(t.Context(), ch, time.Millisecond, time.Hour) {
		t.Error("Wait on an open channel returned false")
	}
	if n := len(ch); n != 0 {
		t.Errorf("%d events of the burst left queued, want 0", n)
	}

	ch <- 1
	close(ch)
	if Wait(t.Context(), ch, time.Hour, time.Hour) {
		t.Error("Wait on a closed channel returned true")
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if !Wait(ctx, make(chan int), time.Hour, time.Hour) {
		t.Error("Wait with an ended context returned false")
	}
}

// TestWaitFloor: WaitFloor holds a burst that paused until its floor,
// taking in the events that come meanwhile.
func TestWaitFloor(t *testing.T) {
	ch := make(chan int, 8)
	const hold = 50 * time.Millisecond
	start := time.Now()
	go func() {
		time.Sleep(hold / 2)
		ch <- 1
	}()
	if !WaitFloor(t.Context(), ch, time.Millisecond, time.Hour, start.Add(hold)) {
		t.Error("WaitFloor on an open channel returned false")
	}
	if took := time.Since(start); took < hold {
		t.Errorf("WaitFloor returned after %v, before its floor %v", took, hold)
	}
	if n := len(ch); n != 0 {
		t.Errorf("%d events left queued, want 0", n)
	}
}

// TestDue: a burst is due once it pauses for quiet, at most max after its
// first event, never before its floor. The floors here are a previous
// run's start plus max: work run at most once per max, as dra's
// publisher does.
func TestDue(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const quiet, max = 20 * time.Millisecond, 200 * time.Millisecond
	for _, c := range []struct {
		name              string
		first, last, prev time.Time
		want              time.Time
	}{
		{"one event, idle before", ms(1000), ms(1000), ms(0), ms(1020)},
		{"a burst that paused", ms(1000), ms(1050), ms(0), ms(1070)},
		{"events that never pause", ms(1000), ms(1190), ms(0), ms(1200)},
		{"right after a run", ms(1000), ms(1000), ms(900), ms(1100)},
		{"no run yet", ms(1000), ms(1000), time.Time{}, ms(1020)},
	} {
		if got := Due(c.first, c.last, c.prev.Add(max), quiet, max); !got.Equal(c.want) {
			t.Errorf("%s: %v after t0, want %v", c.name, got.Sub(t0), c.want.Sub(t0))
		}
	}
	if got := Due(ms(1000), ms(1000), time.Time{}, quiet, max); !got.Equal(ms(1020)) {
		t.Errorf("no floor: %v after t0, want 20ms", got.Sub(t0))
	}
}
