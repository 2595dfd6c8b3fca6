package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// The runtime holds one lock across every NRI event of every pod on the
// node, so each millisecond a hook takes delays all pods, those without
// netdra devices too. RunPodSandbox and StopPodSandbox therefore only start
// a podWork and return; the kernel's work (the namespace moves, which RTNL
// serializes) goes on beside the runtime. Fail-closed moves to
// CreateContainer, which waits for the pod's attach to end and refuses the
// container when it failed or its devices are not in the pod's netns.

// podWork is one background attach or detach of a pod's devices. done is
// closed when it ended; err is its outcome, set before done closes.
type podWork struct {
	netns string
	done  chan struct{}
	err   error

	mu    sync.Mutex
	doing string // what it does now, for a refusal while it runs
}

func newPodWork(netns string) *podWork {
	return &podWork{netns: netns, done: make(chan struct{}), doing: "waiting for the pod's earlier work"}
}

// errNotFinished is CreateContainer's refusal when the pod's attach has
// not ended within the hook's time; the kubelet creates the container
// again later, and the attach goes on meanwhile.
var errNotFinished = errors.New("the attach of the pod's devices has not finished yet")

// wait waits until w ended and returns its outcome, or errNotFinished
// when ctx ends first.
func (w *podWork) wait(ctx context.Context) error {
	select {
	case <-w.done:
		return w.err
	case <-ctx.Done():
		w.mu.Lock()
		defer w.mu.Unlock()
		return fmt.Errorf("%w (%s): %w", errNotFinished, w.doing, ctx.Err())
	}
}

// at records what w does now.
func (w *podWork) at(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.doing = fmt.Sprintf(format, args...)
}

// ended reports whether w ended (with or without an error).
func (w *podWork) ended() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// workTimeout bounds one background attach or detach of a pod: long
// enough for many pods' moves at once, which the kernel serializes (about
// 60 a second, shared/RIGS.md), and for a provisioner restart.
const workTimeout = 30 * time.Second

// detachRetries are the waits between the attempts of a background
// detach that failed; after the last, the devices are left to the next
// reconciliation (RemovePodSandbox, Synchronize), which detaches the
// devices of pods that are gone.
var detachRetries = []time.Duration{100 * time.Millisecond, 400 * time.Millisecond, 1600 * time.Millisecond}

// attachWork returns the pod's attach for netns: the one started earlier
// (running or ended) unless it was forgotten, or one started now (after
// the pod's detach, if one is running). The pod's sandbox counts as live
// from now on.
func (p *Plugin) attachWork(log *slog.Logger, uid, netns string) *podWork {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.netns[uid] = netns
	if w := p.attaching[uid]; w != nil && w.netns == netns {
		return w
	}
	w, after := newPodWork(netns), p.detaching[uid]
	p.attaching[uid] = w
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		defer close(w.done)
		if after != nil {
			<-after.done
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), workTimeout)
		defer cancel()
		w.err = p.attachPod(ctx, log, w, uid)
		p.metrics.background("attach", start, w.err)
		if w.err != nil {
			log.Error("Attaching the pod's devices: its containers are refused", "error", w.err)
		}
	}()
	return w
}

// forget drops the pod's attach w, so that the next CreateContainer
// starts another.
func (p *Plugin) forget(uid string, w *podWork) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.attaching[uid] == w {
		delete(p.attaching, uid)
	}
}

// detachWork starts the detach of the pod's devices from netns (all its
// attached devices when netns is empty), after the pod's attach and
// earlier detach end. A failed detach is retried (detachRetries), then
// logged and left to the next reconciliation.
func (p *Plugin) detachWork(log *slog.Logger, uid, netns string) *podWork {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := []*podWork{p.attaching[uid], p.detaching[uid]}
	delete(p.attaching, uid)
	w := newPodWork(netns)
	p.detaching[uid] = w
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		defer p.ended(uid, w)
		for _, b := range before {
			if b != nil {
				<-b.done
			}
		}
		start := time.Now()
		for attempt := 0; ; attempt++ {
			ctx, cancel := context.WithTimeout(context.Background(), workTimeout)
			w.err = p.detachPod(ctx, log, uid, netns)
			cancel()
			if w.err == nil || attempt == len(detachRetries) {
				break
			}
			log.Warn("Detaching the pod's devices: trying again", "in", detachRetries[attempt], "error", w.err)
			time.Sleep(detachRetries[attempt])
		}
		p.metrics.background("detach", start, w.err)
		if w.err != nil {
			log.Error("Detaching the pod's devices: left to the next reconciliation", "error", w.err)
		}
	}()
	return w
}

// ended closes the pod's detach w and forgets it.
func (p *Plugin) ended(uid string, w *podWork) {
	p.mu.Lock()
	if p.detaching[uid] == w {
		delete(p.detaching, uid)
	}
	p.mu.Unlock()
	close(w.done)
}

// Wait waits until the background attaches and detaches started so far
// have ended (a shutdown, a test).
func (p *Plugin) Wait() { p.bg.Wait() }
