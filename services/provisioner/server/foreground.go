package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// The eBPF work Setup and Free leave running (armPrograms,
// removeInBackground) attaches and detaches tcx programs, and the kernel
// holds RTNL across each while it waits for an RCU grace period
// (tcx_entry_sync). Setup and Free need RTNL too, so the calls the kubelet
// waits for would queue behind the programs of the devices before them.
// The background work therefore waits until no Setup or Free has run for
// armQuiet, at most armMaxWait: the calls go first, and the programs go on
// while the pod's sandbox is made. It holds its device's lock meanwhile,
// so a call for that device ends the wait (bgJob.hurry), and a Free
// cancels programs not put on yet.
//
// Taking programs off a freed device (removeInBackground) also waits for
// the programs being put on, at most removeMaxWait, so that a claim
// unprepared right after its prepare does not put each removal in front of
// the arming its Free waits for. bench/RESULTS.md has what this saves.
const (
	armQuiet      = 10 * time.Millisecond
	armMaxWait    = 100 * time.Millisecond
	removeMaxWait = time.Second
)

// foreground counts the calls in flight that background work yields to.
type foreground struct {
	mu      sync.Mutex
	n       int           // calls in flight
	ended   time.Time     // when the last one ended
	changed chan struct{} // closed, and made again, when n changes
}

// enter counts a call in flight until the returned func is called.
func (f *foreground) enter() (exit func()) {
	f.mu.Lock()
	f.n++
	f.signal()
	f.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			f.mu.Lock()
			f.n--
			f.ended = time.Now()
			f.signal()
			f.mu.Unlock()
		})
	}
}

// signal wakes the waiters of yield; under f.mu.
func (f *foreground) signal() {
	if f.changed != nil {
		close(f.changed)
	}
	f.changed = make(chan struct{})
}

// yield waits until no call is in flight and none ended within quiet, or
// until maxWait passed or hurry closed.
func (f *foreground) yield(quiet, maxWait time.Duration, hurry <-chan struct{}) {
	deadline := time.NewTimer(maxWait)
	defer deadline.Stop()
	quietEnds := time.NewTimer(quiet)
	defer quietEnds.Stop()
	for {
		f.mu.Lock()
		if f.changed == nil {
			f.changed = make(chan struct{})
		}
		n, changed, left := f.n, f.changed, quiet-time.Since(f.ended)
		f.mu.Unlock()
		if n == 0 && left <= 0 {
			return
		}
		var quietEnded <-chan time.Time // none while a call is in flight
		if n == 0 {
			quietEnds.Reset(left)
			quietEnded = quietEnds.C
		}
		select {
		case <-changed:
		case <-quietEnded:
		case <-hurry:
			return
		case <-deadline.C:
			return
		}
	}
}

// bgJob is background eBPF work waiting its turn (yield) on a device
// whose lock it holds.
type bgJob struct {
	arm      bool // programs to put on (armPrograms), else to take off
	hurry    chan struct{}
	once     sync.Once
	canceled atomic.Bool
}

// startJob registers the background work about to run on device; an
// arm counts in s.arming until done is called.
func (s *Server) startJob(device string, arm bool) (j *bgJob, done func()) {
	j, done = &bgJob{arm: arm, hurry: make(chan struct{})}, func() {}
	if arm {
		done = s.arming.enter()
	}
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if s.jobs == nil {
		s.jobs = map[string]*bgJob{}
	}
	s.jobs[device] = j
	return j, done
}

// inBackground runs f on device in the background once its turn came
// (wait), one device at a time (bgTurn), then calls unlock, the device's
// lock its caller holds. arm says f puts programs on (a Free cancels it
// before its turn), else it takes them off.
func (s *Server) inBackground(device string, arm bool, unlock func(), f func()) {
	j, done := s.startJob(device, arm)
	s.background.Go(func() {
		defer unlock()
		defer done()
		if !s.wait(device, j) {
			return // freed before its turn
		}
		s.bgTurn.Lock()
		defer s.bgTurn.Unlock()
		f()
	})
}

// wait is yield for j's turn; it reports whether j is still to run.
func (s *Server) wait(device string, j *bgJob) bool {
	if !j.arm {
		s.arming.yield(0, removeMaxWait, j.hurry)
	}
	s.calls.yield(armQuiet, armMaxWait, j.hurry)
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	if s.jobs[device] == j {
		delete(s.jobs, device)
	}
	return !j.canceled.Load()
}

// hurry ends the wait of the work pending on device, if any, before a
// call takes the device's lock; cancelArm (Free) drops programs that
// are not on yet: nothing will attach the device before its next Setup.
func (s *Server) hurry(device string, cancelArm bool) {
	s.jobsMu.Lock()
	defer s.jobsMu.Unlock()
	j := s.jobs[device]
	if j == nil {
		return
	}
	if cancelArm && j.arm {
		j.canceled.Store(true)
	}
	j.once.Do(func() { close(j.hurry) })
}
