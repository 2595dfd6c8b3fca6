package driver

import (
	"sync"
	"time"
)

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
