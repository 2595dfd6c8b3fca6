package hostdev

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestFollow_Resubscribes: when the kernel ends a subscription, follow
// reports it lost, subscribes again (retrying a failed attempt), asks for a
// rescan and goes on delivering events; when ctx ends it drains the
// channel and returns.
func TestFollow_Resubscribes(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	first := make(chan int, 1)
	first <- 1
	close(first) // the kernel ended the subscription
	second := make(chan int)

	var mu sync.Mutex
	attempts, lost := 0, 0
	subscribe := func(context.Context) (<-chan int, error) {
		mu.Lock()
		defer mu.Unlock()
		attempts++
		if attempts == 1 {
			return nil, errors.New("ENOBUFS")
		}
		return second, nil
	}
	notified := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(ctx, testLogger(t), "test", first, subscribe,
			func(v int) bool { return v%2 == 1 }, func() { notified <- struct{}{} }, func() { mu.Lock(); lost++; mu.Unlock() }, time.Millisecond)
	}()
	<-notified  // event 1
	<-notified  // the resubscription
	second <- 2 // not relevant
	second <- 3
	<-notified
	if n := len(notified); n != 0 {
		t.Errorf("%d notifications too many", n)
	}
	mu.Lock()
	if attempts != 2 {
		t.Errorf("subscribed %d times, want 2 (one failure)", attempts)
	}
	if lost != 1 {
		t.Errorf("lost called %d times, want 1 (the cache must be refilled once)", lost)
	}
	mu.Unlock()

	cancel()
	go func() { second <- 4; close(second) }() // the library's last event after ctx ended, then close
	<-done
}
