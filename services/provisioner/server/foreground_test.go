package server

import (
	"testing"
	"time"
)

// yielded runs yield in the background and returns a channel closed when
// it returned.
func yielded(f *foreground, quiet, maxWait time.Duration, hurry <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.yield(quiet, maxWait, hurry)
	}()
	return done
}

func returned(done <-chan struct{}, within time.Duration) bool {
	select {
	case <-done:
		return true
	case <-time.After(within):
		return false
	}
}

func TestYieldWaitsForTheCallsInFlight(t *testing.T) {
	var f foreground
	if !returned(yielded(&f, time.Millisecond, time.Hour, nil), 10*time.Second) {
		t.Fatal("yield with no call ever made did not return")
	}
	exit := f.enter()
	done := yielded(&f, time.Millisecond, time.Hour, nil)
	if returned(done, 50*time.Millisecond) {
		t.Fatal("yield returned while a call was in flight")
	}
	second := f.enter()
	exit()
	if returned(done, 50*time.Millisecond) {
		t.Fatal("yield returned while a second call was in flight")
	}
	second()
	second() // exit is idempotent
	if !returned(done, 10*time.Second) {
		t.Fatal("yield did not return after the calls ended")
	}
}

func TestYieldEndsOnHurryAndMaxWait(t *testing.T) {
	var f foreground
	defer f.enter()()
	hurry := make(chan struct{})
	done := yielded(&f, time.Millisecond, time.Hour, hurry)
	if returned(done, 50*time.Millisecond) {
		t.Fatal("yield returned while a call was in flight")
	}
	close(hurry)
	if !returned(done, 10*time.Second) {
		t.Fatal("yield did not return when hurried")
	}
	if !returned(yielded(&f, time.Millisecond, 20*time.Millisecond, nil), 10*time.Second) {
		t.Fatal("yield did not return after its longest wait")
	}
}

func TestJobsHurryAndCancel(t *testing.T) {
	s := &Server{}
	defer s.calls.enter()() // a Setup in flight the whole test: jobs wait
	arm, done := s.startJob("d1", true)
	ran := make(chan bool)
	go func() { ran <- s.wait("d1", arm) }()
	s.hurry("d2", true) // another device's call: no effect on d1
	select {
	case <-ran:
		t.Fatal("the job stopped waiting for another device's call")
	case <-time.After(50 * time.Millisecond):
	}
	s.hurry("d1", true) // a Free of d1
	if <-ran {
		t.Error("programs canceled by a Free were still to be put on")
	}
	done()

	arm, done = s.startJob("d1", true)
	go func() { ran <- s.wait("d1", arm) }()
	s.hurry("d1", false) // an Attach of d1
	if !<-ran {
		t.Error("programs hurried by an Attach were not to be put on")
	}
	done()

	remove, _ := s.startJob("d1", false)
	go func() { ran <- s.wait("d1", remove) }()
	s.hurry("d1", true) // a Free does not cancel a removal
	if !<-ran {
		t.Error("a removal was canceled")
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if len(s.jobs) != 0 {
		t.Errorf("jobs left registered: %v", s.jobs)
	}
}

func TestRemovalWaitsForThePrograms(t *testing.T) {
	s := &Server{}
	_, armed := s.startJob("d1", true) // being put on
	remove, _ := s.startJob("d2", false)
	ran := make(chan bool)
	go func() { ran <- s.wait("d2", remove) }()
	select {
	case <-ran:
		t.Fatal("a removal went before the programs being put on")
	case <-time.After(50 * time.Millisecond):
	}
	armed()
	if !<-ran {
		t.Error("a removal was canceled")
	}
}
