package server

import (
	"context"
	"strings"
	"sync"

	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
)

// Sweeper takes off the eBPF programs of netdra's that no allocated device
// holds; it is *ebpf.Programs in production.
type Sweeper interface {
	// Devices lists the device slots with something pinned.
	Devices() ([]string, error)
	// Remove takes off and forgets everything of a slot; idempotent.
	Remove(slot string) error
	// RemoveStrays takes off every interface of the netns at netnsPath
	// the programs of netdra's that no link holds, and returns them.
	RemoveStrays(ctx context.Context, netnsPath string) ([]ebpf.Stray, error)
}

var _ Sweeper = (*ebpf.Programs)(nil)

// SetSweeper makes the provisioner sweep with sw (Sweep): at the first
// ConfigureRequest.prepared_devices after its start, and when Sweep is
// called. Without it there is no sweep. Call it before serving.
func (s *Server) SetSweeper(sw Sweeper) { s.sweeper = sw }

// allocated is what the provisioner knows of the devices prepared for
// claims, for the sweep: a slot (slot()) is allocated while a Setup or a
// Restore of this process prepared it and no Free of this process undid it
// since (here), or, for a slot this process has not touched, while the
// last list named its device (listed: prepared before it started, which
// only the caller's record knows). Before a list came (known false),
// nothing is known to be free.
type allocated struct {
	mu     sync.Mutex
	listed map[string]bool // device names
	known  bool
	here   map[string]bool // by slot: true prepared, false freed
}

// list replaces the list; first reports whether it is the first.
func (a *allocated) list(devices []string) (first bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	first = !a.known
	a.known = true
	a.listed = make(map[string]bool, len(devices))
	for _, d := range devices {
		a.listed[d] = true
	}
	return first
}

// prepared records a Setup or Restore of slot; freed a Free of it.
func (a *allocated) prepared(slot string) { a.set(slot, true) }
func (a *allocated) freed(slot string)    { a.set(slot, false) }

func (a *allocated) set(slot string, prepared bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.here == nil {
		a.here = map[string]bool{}
	}
	a.here[slot] = prepared
}

// free reports whether slot is known to have no allocation.
func (a *allocated) free(slot string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if p, ok := a.here[slot]; ok {
		return !p
	}
	return a.known && !a.listed[deviceOf(slot)]
}

// deviceOf is the device a slot is of (the inverse of slot()).
func deviceOf(slot string) string {
	d, _, _ := strings.Cut(slot, "_")
	return d
}

// listPrepared takes a Configure's list of the prepared devices (absent:
// nothing changes); the first one after the start sweeps, in the
// background.
func (s *Server) listPrepared(l *provisionerv1.PreparedDevices) {
	if l == nil || !s.alloc.list(l.GetDevices()) || s.sweeper == nil {
		return
	}
	s.background.Go(func() { s.Sweep(s.life) })
}

// Sweep takes netdra's eBPF programs off what no allocation holds: every
// device slot with programs pinned whose device is known to be free and
// is in no pod's netns the provisioner holds (Remove, under the device's
// lock: wherever its link is), then the programs of netdra's that no link
// holds off every interface of the host (RemoveStrays). Before the first
// list of prepared devices it does nothing: any device may be allocated.
// Failures are logged; the next sweep tries again.
func (s *Server) Sweep(ctx context.Context) {
	if s.sweeper == nil {
		return
	}
	s.alloc.mu.Lock()
	known := s.alloc.known
	s.alloc.mu.Unlock()
	if !known {
		return
	}
	slots, err := s.sweeper.Devices()
	if err != nil {
		s.log.Error("eBPF programs of freed devices not swept", "error", err)
		return
	}
	for _, sl := range slots {
		if err := s.sweepSlot(ctx, sl); err != nil {
			s.log.Error("eBPF programs of a freed device not removed", "slot", sl, "error", err)
		}
	}
	if _, err := s.sweeper.RemoveStrays(ctx, s.mover.HostNetns()); err != nil {
		s.log.Error("stray eBPF programs of netdra's not all removed from the host's interfaces", "error", err)
	}
}

// sweepSlot removes slot's programs and pins if its device is free and
// in no pod the provisioner holds, under the device's lock.
func (s *Server) sweepSlot(ctx context.Context, slot string) error {
	device := deviceOf(slot)
	if !s.alloc.free(slot) {
		return nil
	}
	unlock, err := s.locks.Lock(ctx, device)
	if err != nil {
		return err
	}
	defer unlock()
	if _, _, held := s.handles.path(device); held || !s.alloc.free(slot) {
		return nil
	}
	if err := s.sweeper.Remove(slot); err != nil {
		return err
	}
	s.log.Info("removed netdra's eBPF programs from a device without an allocation (a provisioner stopped before it took them off)", "slot", slot)
	return nil
}
