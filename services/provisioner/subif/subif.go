// Package subif is the sub-interface device manager ("subif"): it offers
// macvlan (modes bridge, private, vepa, passthru), ipvlan (l2, l3, l3s)
// and 802.1Q VLAN links of configured parent interfaces, a count of each
// per configured entry, as devices <name>-0 .. <name>-<count-1>. A
// sub-interface is virtual, like a dummy: no link exists until a pod has
// it. Setup only records what the link will be (its kind, mode, parent and
// VLAN ID, a MAC); the provisioner creates it directly inside the pod's
// network namespace at Attach (link.Mover.CreateSub: one RTM_NEWLINK in
// the host naming the pod's namespace and the parent) and deletes it there
// at Detach, so a sub-interface costs no namespace move, and the parent
// never moves at all. A parent that a default route of the host goes
// through (the node's uplink, as the host manager reckons it) is not
// offered unless its entry says allowDefaultRoute. The devices' health is
// their parent's: a parent that is down, administratively down or gone
// makes every device of it unhealthy (LINK_STATE_DOWN), and the inventory
// is published again on every link and default-route event.
package subif

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/hostdev"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/debounce"
)

// DefaultResync is how often Run rescans without an event.
const DefaultResync = 30 * time.Second

// Manager is the sub-interface manager. Its methods are safe for
// concurrent use; Setup and Free on the same device must not overlap (the
// provisioner serializes calls per device).
type Manager struct {
	log    *slog.Logger
	offers []offer
	byName map[string]*offer // device name prefix -> offer
	ns     netlinkns.Opener
	resync time.Duration
}

var _ manager.Manager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager) error

// WithNetns makes the Manager look for parents in the network namespace
// at path instead of its own. Tests use it to work in a throwaway
// namespace.
func WithNetns(path string) Option {
	return func(m *Manager) (err error) {
		m.ns, err = netlinkns.Check(path)
		return err
	}
}

// WithResync sets how often Run rescans without an event (DefaultResync).
func WithResync(d time.Duration) Option {
	return func(m *Manager) error {
		m.resync = d
		return manager.CheckResync(d)
	}
}

// New returns a sub-interface manager for cfg. A bad cfg is a
// *fielderr.Error for a field relative to the config ("parents[1].mode"),
// as the provisioner's factories report it; nothing is looked up on the
// node yet. cfg's enabled flag is the caller's business. A nil log
// discards.
func New(log *slog.Logger, cfg *provisionerv1.SubifConfig, opts ...Option) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	offers, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	m := &Manager{log: log, offers: offers, byName: map[string]*offer{}, resync: DefaultResync}
	for i := range m.offers {
		m.byName[m.offers[i].name] = &m.offers[i]
	}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Run publishes the offered devices at once, then again whenever a
// parent's presence, state, MTU or uplink status changes: on link and
// default-route events in the host (a burst makes one rescan) and on the
// periodic resync. It returns nil when ctx ends and an error when it
// cannot start; a later failed scan is logged and retried.
func (m *Manager) Run(ctx context.Context, publish func([]*devicev1.Device)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	w, err := hostdev.Watch(ctx, m.log, m.ns, changed)
	if w != nil {
		defer w.Wait()
	}
	if err != nil {
		return err
	}
	s := &scanner{m: m, withheld: map[string]bool{}}
	last, err := s.scan()
	if err != nil {
		return fmt.Errorf("discovering sub-interface parents: %w", err)
	}
	publish(last)
	m.log.Debug("published sub-interfaces", "count", len(last))
	tick := time.NewTicker(m.resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			debounce.Wait(ctx, changed, manager.RescanQuiet, manager.RescanMaxAfter(0))
		case <-tick.C:
		}
		devs, err := s.scan()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			m.log.Warn("discovering sub-interface parents; retrying at the next change or resync", "error", err)
			continue
		case slices.EqualFunc(last, devs, func(a, b *devicev1.Device) bool { return proto.Equal(a, b) }):
			continue
		}
		publish(devs)
		m.log.Debug("published sub-interfaces", "count", len(devs))
		last = devs
	}
}
