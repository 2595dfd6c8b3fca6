package driver

import (
	"context"
	"sync"
	"time"
)

// keyedLocks is a set of mutexes by key whose waiters give up when their
// context ends.
type keyedLocks struct {
	mu   sync.Mutex
	held map[string]chan struct{}
}

func newKeyedLocks() keyedLocks { return keyedLocks{held: map[string]chan struct{}{}} }

// lock takes the lock for key and returns its unlock, or ctx's error.
func (l *keyedLocks) lock(ctx context.Context, key string) (func(), error) {
	for {
		l.mu.Lock()
		ch, busy := l.held[key]
		if !busy {
			ch = make(chan struct{})
			l.held[key] = ch
			l.mu.Unlock()
			return func() {
				l.mu.Lock()
				delete(l.held, key)
				l.mu.Unlock()
				close(ch)
			}, nil
		}
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// retrySchedule is when each FREEING_FAILED allocation is retried next, by
// allocation key.
type retrySchedule struct {
	mu  sync.Mutex
	due map[string]time.Time
}

func (s *retrySchedule) get(key string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.due[key]
	return t, ok
}

func (s *retrySchedule) set(key string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.due[key] = t
}

func (s *retrySchedule) forget(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.due, key)
}

// keep forgets every key not in keys.
func (s *retrySchedule) keep(keys map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.due {
		if !keys[k] {
			delete(s.due, k)
		}
	}
}
