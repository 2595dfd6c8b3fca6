// Package hostdev is the host device manager ("host"): it hands whole
// existing host interfaces to pods. The configuration selects interfaces by
// name (exact or shell glob), kernel driver and PCI vendor and device IDs;
// the selections are ANDed. An interface that a default route of the host
// goes through (one that holds it, or a port of the bridge or bond, or the
// lower link of the VLAN or macvlan, that holds it) is never offered,
// whatever the configuration says, so that a claim cannot take the node's
// uplink. The inventory follows the host: it is
// published again when links or default routes change (rtnetlink events)
// and on a periodic resync for what has no events (sysfs).
//
// Setup only records the interface as it is; moving it into the pod and
// back is the link package's job, done by the provisioner for every
// manager.
package hostdev

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/ebpf"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/netlinkns"
	"github.com/netdra/netdra/shared/debounce"
)

// DefaultResync is how often Run rescans without an event.
const DefaultResync = 30 * time.Second

// Manager is the host device manager. Its methods are safe for concurrent
// use; Setup and Free on the same device must not overlap (the provisioner
// serializes calls per device).
type Manager struct {
	log       *slog.Logger
	sysfsRoot string
	sel       selector
	ns        netlinkns.Opener
	resync    time.Duration
	// handoff, when set, takes the host's eBPF programs off an interface
	// at Setup, except for the pools in keep.
	handoff *ebpf.Handoff
	keep    map[string]bool
	// devRoot is where the host's device nodes are (an RDMA device's
	// /dev/infiniband nodes are under it).
	devRoot string
	// links is the host's links while Run follows their events, for
	// Run's rescans and for Setup's uplink check.
	links *linkCache
}

var _ manager.Manager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager) error

// WithNetns makes the Manager treat the network namespace at path as the
// host's, instead of the namespace it runs in. Tests use it to work in a
// throwaway namespace. The path must name a network namespace now and
// whenever the Manager works.
func WithNetns(path string) Option {
	return func(m *Manager) (err error) {
		m.ns, err = netlinkns.Check(path)
		return err
	}
}

// WithResync sets how often Run rescans without an event (DefaultResync).
// It must be positive.
func WithResync(d time.Duration) Option {
	return func(m *Manager) error {
		m.resync = d
		return manager.CheckResync(d)
	}
}

// DefaultDevRoot is where the host's device nodes are, unless WithDevRoot
// says otherwise.
const DefaultDevRoot = "/dev"

// WithDevRoot sets where the host's device nodes are (DefaultDevRoot): the
// host paths of an RDMA device's character devices are under it. Empty
// keeps the default; otherwise it must be a clean absolute path. The
// manager never opens it.
func WithDevRoot(dir string) Option {
	return func(m *Manager) error {
		if dir == "" {
			return nil
		}
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
			return fmt.Errorf("device root %q is not a clean absolute path", dir)
		}
		m.devRoot = dir
		return nil
	}
}

// New returns a host manager for cfg that reads device details from the
// sysfs tree at sysfsRoot ("" is /sys). A bad cfg is a *fielderr.Error for
// a field relative to the config ("ifNames[1]"), as the provisioner's
// factories report it: at least one of ifNames, drivers, vendorIds and
// deviceIds must be set, globs must be valid path.Match patterns and IDs
// 16-bit hex (0x8086). cfg's enabled flag is the caller's business. A nil
// log discards.
func New(log *slog.Logger, sysfsRoot string, cfg *provisionerv1.HostConfig, opts ...Option) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if sysfsRoot == "" {
		sysfsRoot = "/sys"
	}
	sel, err := parseConfig(cfg)
	if err != nil {
		return nil, err
	}
	m := &Manager{log: log, sysfsRoot: sysfsRoot, sel: sel, resync: DefaultResync, keep: map[string]bool{}, devRoot: DefaultDevRoot,
		links: &linkCache{}}
	for _, p := range cfg.GetKeepEbpfProgramsPools() {
		m.keep[p] = true
	}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Run publishes the selected host interfaces at once, then again whenever
// the set or a device's details change: on link events, on default-route
// events and on the periodic resync. It returns nil when ctx ends, and an
// error when it cannot start (no netlink socket, subscription or first
// scan). A later failed scan is logged and retried at the next event or
// resync; a subscription the kernel ends (a receive buffer overrun) is
// made again, followed by a rescan. A burst of events makes one rescan
// (debounce.Wait), and a rescan after events reads the links from a cache
// the events keep (linkCache) instead of dumping them all; the resync
// dumps.
func (m *Manager) Run(ctx context.Context, publish func([]*devicev1.Device)) error {
	ctx, cancel := context.WithCancel(ctx)
	changed := make(chan struct{}, 1)
	cache := m.links
	// Once Run returns no event keeps the links: the next Setup dumps.
	defer cache.invalidate()
	w, err := m.watch(ctx, changed, cache)
	if err != nil {
		cancel()
		if w != nil {
			w.Wait()
		}
		return err
	}
	defer func() {
		cancel()
		w.Wait()
	}()
	h, err := m.ns.Dial()
	if err != nil {
		return err
	}
	defer h.Close()

	s := &scanner{m: m, h: h, cache: cache}
	t0 := time.Now()
	last, err := s.scan(true)
	if err != nil {
		return fmt.Errorf("discovering host interfaces: %w", err)
	}
	took := time.Since(t0)
	publish(last)
	m.log.Debug("published host devices", "count", len(last))
	return m.rescan(ctx, s, changed, last, took, publish)
}

// rescan is Run after the first publication, last: it scans again once a
// burst of events on changed settles (waiting at most
// manager.RescanMaxAfter(took), took being what the previous scan cost)
// and at each resync, which dumps the links, and publishes what differs
// from the last publication. A failed scan is logged and retried at the
// next change or resync. It returns nil when ctx ends.
func (m *Manager) rescan(ctx context.Context, s *scanner, changed <-chan struct{}, last []*devicev1.Device, took time.Duration, publish func([]*devicev1.Device)) error {
	tick := time.NewTicker(m.resync)
	defer tick.Stop()
	for {
		fresh := false
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
			// One rescan for a burst of events: a namespace move makes
			// several, a burst of pods many.
			debounce.Wait(ctx, changed, manager.RescanQuiet, manager.RescanMaxAfter(took))
		case <-tick.C:
			fresh = true // a dump: what no event tells, and a check of the cache
		}
		if ctx.Err() != nil {
			return nil
		}
		t0 := time.Now()
		devs, err := s.scan(fresh)
		took = time.Since(t0)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			m.log.Warn("discovering host interfaces; retrying at the next change or resync", "error", err)
			continue
		case slices.EqualFunc(last, devs, func(a, b *devicev1.Device) bool { return proto.Equal(a, b) }):
			continue
		}
		publish(devs)
		m.log.Debug("published host devices", "count", len(devs))
		last = devs
	}
}
