package server

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestSlots_BoundMoves: of 5*MaxMoves moves asked for at once, never more
// than MaxMoves hold a slot together; one whose context ends while it
// waits gets DeadlineExceeded and no slot.
func TestSlots_BoundMoves(t *testing.T) {
	sl := make(slots, MaxMoves)
	var now, peak atomic.Int32
	var wg sync.WaitGroup
	for range 5 * MaxMoves {
		wg.Go(func() {
			release, err := sl.take(context.Background())
			if err != nil {
				t.Error(err)
				return
			}
			n := now.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(5 * time.Millisecond)
			now.Add(-1)
			release()
		})
	}
	wg.Wait()
	if got := peak.Load(); got > MaxMoves || got < MaxMoves/2 {
		t.Errorf("%d moves held a slot at once, want at most %d (and some at once)", got, MaxMoves)
	}
	for range MaxMoves {
		if _, err := sl.take(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := sl.take(ctx); status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("take with every slot held = %v, want DeadlineExceeded", err)
	}
}
