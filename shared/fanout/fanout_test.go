package fanout

import (
	"fmt"
	"sync"
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
