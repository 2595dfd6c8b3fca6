package fanout

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Limit bounds how many calls the batches that share it run at once, and
// serves the batches in the order they came: a batch takes free slots for
// its calls one after the other, and the next batch starts taking its own
// once this one has all of its, so a batch's calls are not held back by
// later batches' (first come, first done), and no batch waits behind later
// ones. A call's goroutine starts only once it holds its slot: the batches
// waiting cost a goroutine each, not one a call.
//
// nri shares one across a node's pod attaches and detaches: a burst of 64
// pods of 8 devices otherwise had 512 calls to the provisioner in flight
// at once, each a goroutine and a gRPC stream at both ends, waiting for
// the provisioner's few moves at a time (the kernel serializes them).
type Limit struct {
	slots *semaphore.Weighted // the calls in flight
	turn  *semaphore.Weighted // the batch taking slots, FIFO
}

// ErrNotStarted is the error of a call Limit.Each did not make: its
// context ended before the call had a slot. The call did nothing.
var ErrNotStarted = errors.New("not started")

// NewLimit returns a Limit of n calls at once; n must be positive.
func NewLimit(n int) *Limit {
	return &Limit{slots: semaphore.NewWeighted(int64(n)), turn: semaphore.NewWeighted(1)}
}

// Each runs f(0) to f(n-1), each once it holds one of l's slots, and
// returns their errors, by index, when all that started have returned.
// When ctx ends before f(i) holds a slot, f(i) and the calls after it are
// not made and their errors are ErrNotStarted wrapping ctx's. A call's slot is freed when it
// returns. A nil l runs every call at once (the package's Each).
func (l *Limit) Each(ctx context.Context, n int, f func(i int) error) []error {
	if l == nil {
		return Each(n, f)
	}
	errs := make([]error, n)
	if n == 0 {
		return errs
	}
	var wg sync.WaitGroup
	started := l.start(ctx, n, func(i int) {
		wg.Go(func() {
			defer l.slots.Release(1)
			errs[i] = f(i)
		})
	})
	for i := started; i < n; i++ {
		errs[i] = fmt.Errorf("%w: %w", ErrNotStarted, context.Cause(ctx))
	}
	wg.Wait()
	return errs
}

// start takes n slots in the batch's turn, calling run(i) as each is
// taken, and returns how many it took: fewer than n when ctx ended first.
func (l *Limit) start(ctx context.Context, n int, run func(i int)) int {
	if l.turn.Acquire(ctx, 1) != nil {
		return 0
	}
	defer l.turn.Release(1)
	for i := range n {
		if l.slots.Acquire(ctx, 1) != nil {
			return i
		}
		run(i)
	}
	return n
}
