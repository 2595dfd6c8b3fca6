package plugin

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/fanout"
	"github.com/netdra/netdra/shared/rpc"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The runtime holds one lock across every NRI event of every pod on the
// node (containerd's NRI adaptation, and CRI-O's), so each millisecond a
// hook takes delays all pods, those without netdra devices too.
// RunPodSandbox and StopPodSandbox therefore only start a podWork and
// return; the kernel's work (the namespace moves, which RTNL serializes)
// goes on beside the runtime. Fail-closed moves to the container: its
// creation waits for the pod's attach (gate.go), in the OCI createRuntime
// hook the plugin puts on it when it can (outside the runtime's lock),
// else in CreateContainer.

// podWork is one background attach or detach of a pod's devices. done is
// closed when it ended; err is its outcome, set before done closes.
type podWork struct {
	netns string
	done  chan struct{}
	err   error

	mu    sync.Mutex
	doing string // what it does now, for a refusal while it runs

	vouched bool // see freshAttach; under the Plugin's mu
}

func newPodWork(netns string) *podWork {
	return &podWork{netns: netns, done: make(chan struct{}), doing: "waiting for the pod's earlier work"}
}

// errNotFinished is the refusal of a container whose pod's attach has not
// ended within the wait; the kubelet creates the container again later,
// and the attach goes on meanwhile.
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

// state says what w is at, for Status: empty for no work.
func (w *podWork) state() string {
	switch {
	case w == nil:
		return ""
	case !w.ended():
		w.mu.Lock()
		defer w.mu.Unlock()
		return "running: " + w.doing
	case w.err != nil:
		return "failed: " + w.err.Error()
	default:
		return "done"
	}
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
// enough for many pods' moves at once, which the kernel serializes under
// RTNL (so a pod's moves wait behind every other pod's), and for a
// provisioner restart.
const workTimeout = 30 * time.Second

// detachBackoff paces the attempts of a background detach that failed: a
// retry per step (100ms, 400ms, 1.6s); after the last, the devices are
// left to the next reconciliation (RemovePodSandbox, Synchronize), which
// detaches the devices of pods that are gone.
var detachBackoff = wait.Backoff{Duration: 100 * time.Millisecond, Factor: 4, Steps: 3}

// attachWork returns the pod's attach into netns: the one started earlier
// (running or ended), or one started now, after the pod's detach if one
// runs. The pod's sandbox counts as live from now on.
func (p *Plugin) attachWork(log *slog.Logger, uid, netns string) *podWork {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.netns[uid] = netns
	if w := p.attaching[uid]; w != nil && w.netns == netns {
		return w
	}
	w, after := newPodWork(netns), p.detaching[uid]
	p.attaching[uid] = w
	p.bg.Go(func() {
		defer close(w.done)
		if after != nil {
			<-after.done
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), workTimeout)
		defer cancel()
		w.err = p.attachPod(ctx, log, w, uid)
		p.metrics.background("attach", start, w.err)
		p.mu.Lock()
		if _, live := p.netns[uid]; !live && p.attaching[uid] == w {
			delete(p.attaching, uid) // its sandbox went meanwhile
		}
		p.mu.Unlock()
		if w.err != nil {
			log.Error("Attaching the pod's devices: its containers are refused", "error", w.err)
		}
	})
	return w
}

// freshAttach reports whether the pod's attach into netns ended with
// every device of the pod there (or none to attach) and no detach has
// started since, for the first CreateContainer after it: that one needs
// no look at the rows. Later ones look (the kubelet retrying a container
// whose creation failed, for a reason this plugin cannot see).
func (p *Plugin) freshAttach(uid, netns string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.attaching[uid]
	if w == nil || w.netns != netns || !w.ended() || w.err != nil || w.vouched || p.detaching[uid] != nil {
		return false
	}
	w.vouched = true
	return true
}

// forget drops the pod's attach w, so that the next attachWork starts
// another: w failed, or the pod's devices are not in place now (a claim
// prepared after the sandbox started).
func (p *Plugin) forget(uid string, w *podWork) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.attaching[uid] == w {
		delete(p.attaching, uid)
	}
}

// hasWork reports whether the pod has an attach or a detach running: it
// sees to the pod's devices, not a reconciliation.
func (p *Plugin) hasWork(uid string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.attaching[uid]
	return (w != nil && !w.ended()) || p.detaching[uid] != nil
}

// forgetGone drops the ended attaches of pods that are not live: their
// sandboxes went while this plugin was not connected. Under p.mu. The
// running ones drop themselves as they end.
func (p *Plugin) forgetGone() {
	for uid, w := range p.attaching {
		if _, live := p.netns[uid]; !live && w.ended() {
			delete(p.attaching, uid)
		}
	}
}

// detachWork starts the detach of the pod's devices from netns (all its
// attached devices when netns is empty), after the pod's attach and
// earlier detach end. A failed detach is retried (detachBackoff), then
// logged and left to the next reconciliation.
func (p *Plugin) detachWork(log *slog.Logger, uid, netns string) *podWork {
	p.mu.Lock()
	defer p.mu.Unlock()
	before := []*podWork{p.attaching[uid], p.detaching[uid]}
	delete(p.attaching, uid)
	w := newPodWork(netns)
	p.detaching[uid] = w
	p.bg.Go(func() {
		defer p.ended(uid, w)
		for _, b := range before {
			if b != nil {
				<-b.done
			}
		}
		start := time.Now()
		for backoff := detachBackoff; ; {
			ctx, cancel := context.WithTimeout(context.Background(), workTimeout)
			w.err = p.detachPod(ctx, log, uid, netns)
			cancel()
			if w.err == nil || backoff.Steps == 0 {
				break
			}
			d := backoff.Step()
			log.Warn("Detaching the pod's devices: trying again", "in", d, "error", w.err)
			time.Sleep(d)
		}
		p.metrics.background("detach", start, w.err)
		if w.err != nil {
			log.Error("Detaching the pod's devices: left to the next reconciliation", "error", w.err)
		}
	})
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

// errSandboxStopped is an attach's outcome when the pod's sandbox stopped
// before the attach could start.
var errSandboxStopped = errors.New("the pod's sandbox stopped")

// attachPod attaches the pod's prepared devices into w's netns, under the
// pod's lock, all at once within the node's bound (MaxCalls). A device attached to the netns already
// is left alone; one whose link is missing (the node rebooted since
// prepare) is set up again first. Any failure detaches what this call
// attached and is returned.
func (p *Plugin) attachPod(ctx context.Context, log *slog.Logger, w *podWork, uid string) error {
	netns := w.netns
	w.at("waiting for the pod's lock")
	unlock := p.lockPod(uid)
	defer unlock()
	if ns, live := p.netnsOfLive(uid); !live || ns != netns {
		return errSandboxStopped
	}
	w.at("listing the pod's devices")
	allocs, err := p.podAllocations(ctx, uid, statev1.Phase_PHASE_UNSPECIFIED)
	if err != nil {
		return fmt.Errorf("listing the devices of pod %s: %w", uid, err)
	}
	todo := notInPlace(allocs, netns)
	if len(todo) == 0 {
		return nil
	}
	w.at("attaching %s", deviceList(todo))
	errs := p.calls.Each(ctx, len(todo), func(i int) error { return p.attach(ctx, todo[i], uid, netns) })
	var undo []*statev1.Allocation
	for i, err := range errs {
		// The provisioner may have moved a device whose call broke
		// before its reply: detach it too (Detach is idempotent). A
		// device whose attach never started is left alone.
		if err == nil || rpc.OutcomeUnknown(err) && !errors.Is(err, fanout.ErrNotStarted) {
			undo = append(undo, todo[i])
		}
	}
	for i, err := range errs {
		if err != nil {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
			p.rollback(rctx, log, undo, netns)
			cancel()
			a := todo[i]
			return fmt.Errorf("device %s (claim %s/%s): %w", a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName(), err)
		}
	}
	for _, a := range todo {
		log.Info("Attached", "device", a.GetDeviceName(), "podIfName", a.GetConfig().GetPodIfName(), "netns", netns)
	}
	return nil
}

// detachPod detaches the pod's devices attached to netns (to any netns
// when it is empty), under the pod's lock, all at once within the node's
// bound (MaxCalls). Devices attached
// to another netns belong to a newer sandbox of the pod and are left
// alone.
func (p *Plugin) detachPod(ctx context.Context, log *slog.Logger, uid, netns string) error {
	unlock := p.lockPod(uid)
	defer unlock()
	allocs, err := p.podAllocations(ctx, uid, statev1.Phase_PHASE_ATTACHED)
	if err != nil {
		return fmt.Errorf("listing the devices of pod %s: %w", uid, err)
	}
	var todo []*statev1.Allocation
	var nss []string
	for _, a := range allocs {
		ns := netns
		switch {
		case ns == "":
			ns = a.GetNetnsPath()
		case a.GetNetnsPath() != "" && a.GetNetnsPath() != ns:
			continue
		}
		todo, nss = append(todo, a), append(nss, ns)
	}
	// The rows are the current ones: listed just now, under the
	// pod's lock.
	errs := p.calls.Each(ctx, len(todo), func(i int) error { return p.detachRow(ctx, todo[i], nss[i]) })
	for i, err := range errs {
		if err != nil {
			errs[i] = fmt.Errorf("detaching %s from pod %s: %w", todo[i].GetDeviceName(), uid, err)
			continue
		}
		log.Info("Detached", "device", todo[i].GetDeviceName())
	}
	return errors.Join(errs...)
}

// notInPlace are the allocations not attached to netns.
func notInPlace(allocs []*statev1.Allocation, netns string) []*statev1.Allocation {
	var out []*statev1.Allocation
	for _, a := range allocs {
		if a.GetPhase() != statev1.Phase_PHASE_ATTACHED || a.GetNetnsPath() != netns {
			out = append(out, a)
		}
	}
	return out
}

// deviceList names allocs' devices and claims, for a refusal.
func deviceList(allocs []*statev1.Allocation) string {
	names := make([]string, len(allocs))
	for i, a := range allocs {
		names[i] = fmt.Sprintf("device %s (claim %s/%s)", a.GetDeviceName(), a.GetClaimNamespace(), a.GetClaimName())
	}
	return strings.Join(names, ", ")
}
