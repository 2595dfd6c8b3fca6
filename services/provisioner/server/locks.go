package server

import (
	"context"
	"sync"
)

// deviceLocks serializes the calls for one device, and only for it: no lock
// is shared across devices while a link moves.
type deviceLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

// lock waits until name is free or ctx ends, and returns the unlock.
func (l *deviceLocks) lock(ctx context.Context, name string) (func(), error) {
	for {
		l.mu.Lock()
		ch, busy := l.held[name]
		if !busy {
			ch = make(chan struct{})
			l.held[name] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, name)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ch:
		}
	}
}
