package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestEach: every call runs, all of them at once (each waits until all are
// in flight), and each error lands at its index.
func TestEach(t *testing.T) {
	for _, n := range []int{0, 1, 5} {
		var inFlight sync.WaitGroup
		inFlight.Add(n)
		done := make(chan []error, 1)
		go func() {
			done <- Each(n, func(i int) error {
				inFlight.Done()
				inFlight.Wait()
				if i%2 == 1 {
					return fmt.Errorf("call %d", i)
				}
				return nil
			})
		}()
		var errs []error
		select {
		case errs = <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("n=%d: the calls were not in flight together", n)
		}
		if len(errs) != n {
			t.Fatalf("n=%d: %d errors", n, len(errs))
		}
		for i, err := range errs {
			if want := i%2 == 1; (err != nil) != want || want && err.Error() != fmt.Sprintf("call %d", i) {
				t.Errorf("n=%d: error %d = %v", n, i, err)
			}
		}
	}
}

// TestLimit_BoundsCalls: of 8 batches of 8 calls started at once on a
// Limit of 4, never more than 4 calls run together (and 4 do), and every
// call runs once with its error at its index.
func TestLimit_BoundsCalls(t *testing.T) {
	const size, batches, calls = 4, 8, 8
	l := NewLimit(size)
	var now, peak atomic.Int32
	var wg sync.WaitGroup
	for b := range batches {
		wg.Go(func() {
			errs := l.Each(context.Background(), calls, func(i int) error {
				n := now.Add(1)
				for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
				}
				time.Sleep(2 * time.Millisecond)
				now.Add(-1)
				return fmt.Errorf("batch %d call %d", b, i)
			})
			for i, err := range errs {
				if err == nil || err.Error() != fmt.Sprintf("batch %d call %d", b, i) {
					t.Errorf("batch %d: error %d = %v", b, i, err)
				}
			}
		})
	}
	wg.Wait()
	if got := peak.Load(); got != size {
		t.Errorf("%d calls ran at once, want %d", got, size)
	}
}

// TestLimit_BatchesInTurn: batches waiting together take their slots in
// turn, each all of its own before the next takes any, so that a batch's
// calls are not held back by a later batch's.
func TestLimit_BatchesInTurn(t *testing.T) {
	const batches, calls = 6, 5
	l := NewLimit(2)
	var mu sync.Mutex
	var took []int // the batch of each slot taken, in order
	var wg, running sync.WaitGroup
	for b := range batches {
		wg.Go(func() {
			l.start(context.Background(), calls, func(int) {
				mu.Lock()
				took = append(took, b)
				mu.Unlock()
				running.Go(func() {
					time.Sleep(time.Millisecond)
					l.slots.Release(1)
				})
			})
		})
	}
	wg.Wait()
	running.Wait()
	seen := map[int]bool{}
	for i, b := range took {
		if i > 0 && took[i-1] != b && seen[b] {
			t.Fatalf("batch %d took slots after another batch took some: %v", b, took)
		}
		seen[b] = true
	}
	if len(took) != batches*calls {
		t.Errorf("%d slots taken, want %d", len(took), batches*calls)
	}
}

// TestLimit_ContextEnds: a batch whose context ends while it waits for its
// turn or a slot makes no more calls, their errors are the context's, the
// calls it started return their own, and every slot is free afterwards.
func TestLimit_ContextEnds(t *testing.T) {
	l := NewLimit(2)
	release := make(chan struct{})
	held := make(chan []error, 1)
	started := make(chan struct{}, 2)
	go func() {
		held <- l.Each(context.Background(), 2, func(int) error { started <- struct{}{}; <-release; return nil })
	}()
	<-started
	<-started
	// Every slot held: a batch that waits for its turn and one that waits
	// for a slot both give up when their context ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			calls := atomic.Int32{}
			errs := l.Each(ctx, 3, func(int) error { calls.Add(1); return nil })
			for i, err := range errs {
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrNotStarted) {
					t.Errorf("error %d of a batch whose context ended = %v, want %v and %v", i, err, ErrNotStarted, context.DeadlineExceeded)
				}
			}
			if calls.Load() != 0 {
				t.Errorf("%d calls made after the context ended", calls.Load())
			}
		})
	}
	wg.Wait()
	close(release)
	if errs := <-held; errs[0] != nil || errs[1] != nil {
		t.Errorf("the holding batch's errors = %v", errs)
	}
	// All free again: a batch of the Limit's size runs together.
	var together sync.WaitGroup
	together.Add(2)
	done := make(chan struct{})
	go func() {
		l.Each(context.Background(), 2, func(int) error { together.Done(); together.Wait(); return nil })
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("a slot was not freed")
	}
}

// TestLimit_Nil: a nil Limit runs every call at once, as Each.
func TestLimit_Nil(t *testing.T) {
	var l *Limit
	var inFlight sync.WaitGroup
	inFlight.Add(5)
	errs := l.Each(context.Background(), 5, func(int) error { inFlight.Done(); inFlight.Wait(); return nil })
	if len(errs) != 5 {
		t.Fatalf("%d errors", len(errs))
	}
}
