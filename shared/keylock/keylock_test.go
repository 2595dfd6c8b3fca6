package keylock

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func TestLock_OneHolderPerKey(t *testing.T) {
	var s Set
	var mu sync.Mutex
	holders, most := 0, 0
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			unlock, err := s.Lock(context.Background(), "a")
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			holders++
			most = max(most, holders)
			mu.Unlock()
			time.Sleep(time.Millisecond)
			mu.Lock()
			holders--
			mu.Unlock()
			unlock()
		})
	}
	wg.Wait()
	if most != 1 {
		t.Errorf("%d holders of one key at once, want 1", most)
	}
	if n := len(s.held); n != 0 {
		t.Errorf("%d locks left after every unlock, want 0", n)
	}
}

// TestLock_WaitsForItsKeyOnly: another key is not blocked; the same key
// waits, and gives up with its context. (It was the provisioner's
// TestDeviceLocks.)
func TestLock_WaitsForItsKeyOnly(t *testing.T) {
	var l Set
	unlock, err := l.Lock(context.Background(), "a")
	if err != nil {
		t.Fatal(err)
	}
	// Another device is not blocked.
	unlockB, err := l.Lock(context.Background(), "b")
	if err != nil {
		t.Fatal(err)
	}
	unlockB()
	// The same device waits, and gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := l.Lock(ctx, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock of a held device: %v, want DeadlineExceeded", err)
	}
	got := make(chan struct{})
	go func() {
		u, err := l.Lock(context.Background(), "a")
		if err == nil {
			u()
		}
		close(got)
	}()
	unlock()
	<-got
}
