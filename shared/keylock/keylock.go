// Package keylock provides one lock per key (a claim UID, a pod UID, a
// device name), so that work on one key is serialized and work on
// different keys never waits for each other. A key's lock exists only
// while it is held or waited for.
package keylock

import (
	"context"
	"sync"
)

// Set is a set of locks by key. Its zero value is ready to use; a Set
// must not be copied after first use.
type Set struct {
	mu sync.Mutex
	// held has a channel per held key, closed when the key is unlocked.
	held map[string]chan struct{}
}

// Lock waits until key is free and takes it, returning the unlock, which
// must be called exactly once. When ctx ends first, Lock returns ctx's
// error and holds nothing. With a context that never ends it never fails.
func (s *Set) Lock(ctx context.Context, key string) (unlock func(), err error) {
	for {
		s.mu.Lock()
		ch, busy := s.held[key]
		if !busy {
			if s.held == nil {
				s.held = map[string]chan struct{}{}
			}
			ch = make(chan struct{})
			s.held[key] = ch
			s.mu.Unlock()
			return func() {
				s.mu.Lock()
				delete(s.held, key)
				s.mu.Unlock()
				close(ch)
			}, nil
		}
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
