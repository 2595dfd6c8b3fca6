package publish

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	statev1 "github.com/netdra/netdra/protos/netdra/state/v1"
	"github.com/netdra/netdra/shared/debounce"
)

// ErrNotReady is what a publish function returns while it cannot publish
// yet (before registration): the publisher retries quietly.
var ErrNotReady = errors.New("not ready to publish")

// Publisher keeps the driver's ResourceSlices in line with the state
// service's tables and the configured pools.
type Publisher struct {
	log      *slog.Logger
	state    StateWatcher
	publish  func(context.Context, []Pool) error
	debounce time.Duration
	kick     chan struct{}
	// lastStart is when the last publication began (Run's).
	lastStart time.Time

	mu    sync.Mutex
	specs []Spec
	// exhausted are the address pools with no free address
	// (SetExhaustedIPPools).
	exhausted map[string]bool
	devices   map[string]*devicev1.Device
	allocs    map[string]*statev1.Allocation
	synced    bool
	last      Publication
	// force has the next publication made even when it would publish
	// what the last one did (Republish: a new publish target).
	force bool
	// changed is closed (and replaced) at every change of the view.
	changed chan struct{}
	// epoch is the state service's, from its last event; onRestart is
	// called when it changes (the service restarted).
	epoch     string
	onRestart func()
}

// OnRestart has f called (in its own goroutine) whenever the state service
// is seen to have restarted: its epoch changed. Call it before Run.
func (p *Publisher) OnRestart(f func()) { p.onRestart = f }

// View is the publisher's picture of the node, for device health.
type View struct {
	// Synced is false until the first complete view of the state
	// service's tables; the rest is empty then.
	Synced bool
	// Devices is the inventory, by device name.
	Devices map[string]*devicev1.Device
	// Allocations are the allocations, in no order.
	Allocations []*statev1.Allocation
	// Pools is the pool each device was last published in, by device name.
	Pools map[string]string
}

// Publication is what was published last.
type Publication struct {
	Time  time.Time
	Pools []Pool
}

// NewPublisher returns a publisher that calls publish (dra's slice
// publisher; the pools it is given are its to keep, unchanged) once a burst
// of changes pauses, at most debounce after
// its first change, and at most once per debounce interval (Run).
func NewPublisher(log *slog.Logger, state StateWatcher, debounce time.Duration,
	publish func(context.Context, []Pool) error) *Publisher {
	return &Publisher{log: log, state: state, publish: publish, debounce: debounce, kick: make(chan struct{}, 1),
		devices: map[string]*devicev1.Device{}, allocs: map[string]*statev1.Allocation{}, changed: make(chan struct{})}
}

// View returns the current view and a channel closed at its next change.
// The view is the caller's to keep: later changes do not alter it.
func (p *Publisher) View() (View, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := View{Synced: p.synced, Devices: maps.Clone(p.devices), Pools: map[string]string{}}
	for _, a := range p.allocs {
		v.Allocations = append(v.Allocations, a)
	}
	for _, pool := range p.last.Pools {
		for _, d := range pool.Devices {
			v.Pools[d.GetName()] = pool.Name
		}
	}
	return v, p.changed
}

// changedLocked wakes the View watchers.
func (p *Publisher) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// SetPools replaces the configured pools and republishes.
func (p *Publisher) SetPools(specs []Spec) {
	p.mu.Lock()
	p.specs = slices.Clone(specs)
	p.mu.Unlock()
	p.poke()
}

// SetExhaustedIPPools replaces the set of address pools that have no free
// address, and republishes when it changed: the devices of the pools that
// name one of them in their ipPools are tainted (ExhaustedTaints).
func (p *Publisher) SetExhaustedIPPools(names []string) {
	set := map[string]bool{}
	for _, n := range names {
		set[n] = true
	}
	p.mu.Lock()
	same := maps.Equal(set, p.exhausted)
	p.exhausted = set
	p.mu.Unlock()
	if !same {
		p.poke()
	}
}

// Republish has the current view published again even when it is what
// was published last: for a publish function that starts over (the
// kubelet plugin served again, under a new registration or driver name).
func (p *Publisher) Republish() {
	p.mu.Lock()
	p.force = true
	p.mu.Unlock()
	p.poke()
}

// Last returns the last publication.
func (p *Publisher) Last() Publication {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

func (p *Publisher) poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Run follows the state service and publishes until ctx ends. Nothing is
// published before the first complete view of the tables.
func (p *Publisher) Run(ctx context.Context) error {
	go func() { _ = followState(ctx, p.log, p.state, p.apply) }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-p.kick:
		}
		// Published once the changes pause for quietPeriod, at most
		// debounce after the first, and never sooner than debounce after
		// the previous publication began: changes spaced just over the
		// quiet period apart (a burst of pods) are published at most once
		// per debounce, as a publication builds every device again. A
		// change that left the slices as they were (publishOnce skipped
		// it) sets no floor: the inventory that follows a configuration
		// change is not held back by it.
		debounce.WaitFloor(ctx, p.kick, quietPeriod, p.debounce, p.lastStart.Add(p.debounce))
		if err := ctx.Err(); err != nil {
			return err
		}
		start := time.Now()
		published, err := p.publishOnce(ctx)
		if published {
			p.lastStart = start
		}
		if err != nil {
			lvl := slog.LevelWarn
			if errors.Is(err, ErrNotReady) {
				lvl = slog.LevelDebug
			}
			p.log.Log(ctx, lvl, "Publishing ResourceSlices", "error", err)
			time.AfterFunc(time.Second, p.poke)
		}
	}
}

// quietPeriod is how long the changes must pause before they are
// published (at most debounce after the first): the device events of an
// inventory, or a claim's allocation rows, come close together, so a
// short pause means the burst is over.
const quietPeriod = 20 * time.Millisecond

// publishOnce publishes the current view, unless it is what the last
// publication published (and no Republish asked for it): then the
// slices are left alone, which spares building and comparing every
// device again at each change that does not show in them, such as most
// allocations.
// It reports whether it published.
func (p *Publisher) publishOnce(ctx context.Context) (bool, error) {
	p.mu.Lock()
	if !p.synced {
		p.mu.Unlock()
		return false, nil
	}
	devs := slices.SortedFunc(maps.Values(p.devices), func(a, b *devicev1.Device) int { return strings.Compare(a.GetName(), b.GetName()) })
	allocs := slices.Collect(maps.Values(p.allocs))
	specs, force, last, exhausted := p.specs, p.force, p.last, p.exhausted
	p.force = false
	p.mu.Unlock()
	devs = withAllocated(devs, allocs)
	assigned := Assign(p.log, specs, devs, allocs)
	MarkExhausted(assigned, specs, exhausted)
	if !force && !last.Time.IsZero() && samePools(assigned, last.Pools) {
		p.log.Debug("ResourceSlices unchanged", "pools", Summary(assigned))
		return false, nil
	}
	if err := p.publish(ctx, assigned); err != nil {
		if force {
			p.mu.Lock()
			p.force = true // the next attempt publishes
			p.mu.Unlock()
		}
		return true, err
	}
	p.mu.Lock()
	p.last = Publication{Time: time.Now(), Pools: assigned}
	p.changedLocked()
	p.mu.Unlock()
	p.log.Info("Published ResourceSlices", "pools", Summary(assigned))
	return true, nil
}

// samePools reports whether a and b publish the same slices: Resources
// builds them from nothing else than the pools' names, devices, taint
// effects, exhausted address pools and Multus resource names.
func samePools(a, b []Pool) bool {
	return slices.EqualFunc(a, b, func(x, y Pool) bool {
		return x.Name == y.Name && x.TaintEffect == y.TaintEffect && x.MultusResourceName == y.MultusResourceName &&
			slices.Equal(x.ExhaustedIPPools, y.ExhaustedIPPools) &&
			slices.EqualFunc(x.Devices, y.Devices, func(d, e *devicev1.Device) bool { return d == e || proto.Equal(d, e) })
	})
}

// withAllocated returns devs (sorted by name) with the devices that have
// an allocation but that discovery no longer reports (a host interface
// while it sits in a pod's network namespace) added as their allocation
// prepared them, with no link state (the host cannot see their link): a
// device in use stays in its slice with the attributes it was allocated
// by, where Multus, for one, looks it up.
func withAllocated(devs []*devicev1.Device, allocs []*statev1.Allocation) []*devicev1.Device {
	have := map[string]bool{}
	for _, d := range devs {
		have[d.GetName()] = true
	}
	added := false
	for _, a := range allocs {
		pd := a.GetPreparedDevice().GetDevice()
		if pd == nil || pd.GetName() != a.GetDeviceName() || have[pd.GetName()] {
			continue
		}
		d := proto.CloneOf(pd)
		d.LinkState = devicev1.LinkState_LINK_STATE_UNSPECIFIED
		devs = append(devs, d)
		have[d.GetName()], added = true, true
	}
	if added {
		slices.SortFunc(devs, func(a, b *devicev1.Device) int { return strings.Compare(a.GetName(), b.GetName()) })
	}
	return devs
}

// apply keeps the local copy of the tables.
func (p *Publisher) apply(ev *statev1.WatchResponse) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := ev.GetEpoch(); e != "" && e != p.epoch {
		if p.epoch != "" && p.onRestart != nil {
			go p.onRestart()
		}
		p.epoch = e
	}
	switch ev.GetType() {
	case statev1.EventType_EVENT_TYPE_RESET:
		p.devices, p.allocs, p.synced = map[string]*devicev1.Device{}, map[string]*statev1.Allocation{}, false
		p.changedLocked()
		return nil
	case statev1.EventType_EVENT_TYPE_SYNCED:
		p.synced = true
	case statev1.EventType_EVENT_TYPE_UPSERT:
		if d := ev.GetDevice(); d != nil {
			p.devices[d.GetName()] = d
		} else if a := ev.GetAllocation(); a != nil {
			p.allocs[a.GetPool()+"/"+a.GetDeviceName()+"/"+a.GetShareId()] = a
		}
	case statev1.EventType_EVENT_TYPE_DELETE:
		if d := ev.GetDevice(); d != nil {
			delete(p.devices, d.GetName())
		} else if a := ev.GetAllocation(); a != nil {
			delete(p.allocs, a.GetPool()+"/"+a.GetDeviceName()+"/"+a.GetShareId())
		}
	}
	if p.synced {
		p.changedLocked()
		p.poke()
	}
	return nil
}
