// Package publishtest is a source of publisher views for the tests of
// what reads them (publish.View and the channel closed at its next
// change), set by the test.
package publishtest

import (
	"sync"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/services/dra/publish"
)

// Views holds one view, not synced until the first Set. Make it with New.
type Views struct {
	mu      sync.Mutex
	v       publish.View
	changed chan struct{}
}

// New returns a source whose view is not synced yet.
func New() *Views { return &Views{changed: make(chan struct{})} }

// View returns the view and a channel closed at its next Set.
func (s *Views) View() (publish.View, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.v, s.changed
}

// Set makes the view synced with allocs as its allocations and wakes
// whoever waits for a change.
func (s *Views) Set(allocs ...*statev1.Allocation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.v = publish.View{Synced: true, Allocations: allocs}
	close(s.changed)
	s.changed = make(chan struct{})
}
