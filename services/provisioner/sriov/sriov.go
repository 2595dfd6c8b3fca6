// Package sriov is the provisioner's "sr-iov" device manager: it gives the
// configured physical functions their counts of SR-IOV virtual functions
// (sriov_numvfs; a PF's VFs are re-created for a new count only while none
// of them is prepared for a claim), discovers every Ethernet VF
// from sysfs and keeps that inventory current from link events and a
// periodic rescan, and sets a VF's admin settings (VLAN, QoS and protocol,
// MAC, spoof check, trust, link state, tx rates) through its PF for a claim,
// recording the VF's original settings so that Free restores them exactly.
// Moving a VF's netdev into a pod is not its job (package link). Every sysfs
// path is under a configurable root, and every netlink call goes through the
// small pfLinks interface.
package sriov

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/debounce"
)

// DefaultResync is how often Run rescans sysfs when no link event asks it
// to: VFs bound to vfio-pci (or to no driver) come and go without one.
const DefaultResync = 30 * time.Second

// Manager is the sr-iov device manager. Its methods are safe for concurrent
// use; Setup and Free calls on the same device must not overlap (the caller
// serializes per device).
type Manager struct {
	log       *slog.Logger
	root      string
	cfg       *provisionerv1.SriovConfig
	pfs       map[string]bool // the configured PFs; empty publishes all
	resync    time.Duration
	devRoot   string
	links     pfLinks
	subscribe subscribeFunc
	vfio      vfioOps
	prepared  Prepared
	report    func(warnings []string)
	writeVFs  func(path string, n uint64) error
}

var _ manager.Manager = (*Manager)(nil)

// Option configures a Manager.
type Option func(*Manager)

// WithResync sets how often Run rescans sysfs without a link event
// (DefaultResync). A non-positive d keeps the default.
func WithResync(d time.Duration) Option {
	return func(m *Manager) {
		if d > 0 {
			m.resync = d
		}
	}
}

// WithDevRoot sets where the host's device nodes are (DefaultDevRoot):
// the host paths of a vfio VF's device nodes are under it. Empty keeps
// the default.
func WithDevRoot(dir string) Option {
	return func(m *Manager) {
		if dir != "" {
			m.devRoot = dir
		}
	}
}

// WithPrepared tells the manager which VFs are prepared for claims, so
// that it re-creates the VFs of a PF whose count differs from its vfCount
// when none of them is (and looks again when p says VFs may have been
// freed). Without it such a PF is left alone.
func WithPrepared(p Prepared) Option { return func(m *Manager) { m.prepared = p } }

// WithReport has Run call report with what it does not do as configured,
// one sentence per PF (a count that waits), after its first provisioning
// and again whenever that changes; never after Run returned.
func WithReport(report func(warnings []string)) Option {
	return func(m *Manager) { m.report = report }
}

// withWriteNumVFs replaces the writes to sriov_numvfs (tests).
func withWriteNumVFs(w func(path string, n uint64) error) Option {
	return func(m *Manager) { m.writeVFs = w }
}

// withLinks replaces the netlink calls (tests).
func withLinks(l pfLinks) Option { return func(m *Manager) { m.links = l } }

// withSubscribe replaces the link event subscription (tests).
func withSubscribe(s subscribeFunc) Option { return func(m *Manager) { m.subscribe = s } }

// New returns a Manager for the VFs under sysfsRoot (/sys, or /host/sys in
// the pod) configured by cfg. It changes nothing: a bad cfg is a
// *fielderr.Error with the field relative to cfg ("ifaces[0].vfCount"),
// and so is a vfCount above the sriov_totalvfs of its PF, read from sysfs
// (a PF that cannot be read is Run's to report). A nil log discards; a nil
// cfg manages every VF and provisions none.
func New(log *slog.Logger, sysfsRoot string, cfg *provisionerv1.SriovConfig, opts ...Option) (*Manager, error) {
	if err := ValidateConfig(cfg); err != nil {
		return nil, err
	}
	if err := checkTotals(sysfsRoot, cfg.GetIfaces()); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		log:     log,
		root:    sysfsRoot,
		cfg:     proto.CloneOf(cfg),
		pfs:     map[string]bool{},
		resync:  DefaultResync,
		devRoot: DefaultDevRoot,
		links:   netlinkLinks{},
		vfio:    defaultVfioOps(),
	}
	for _, iface := range cfg.GetIfaces() {
		m.pfs[iface.GetIfName()] = true
	}
	m.subscribe = subscribeLinks(log)
	for _, o := range opts {
		o(m)
	}
	return m, nil
}

// Run provisions the configured PFs' VFs, publishes the VFs of the
// configured PFs (all VFs when none are configured) at once, and then
// again whenever that inventory changes, as seen on a rescan of sysfs after
// a link event in the host network namespace or every resync interval. A
// PF whose count waits (its VFs are prepared for claims, see provisionPF)
// is tried again at each rescan and whenever the Prepared says VFs may have
// been freed; its VFs, once re-created, are published before any Setup of
// them can run. The warnings (one per waiting PF) go to the report after
// the first publication and at every change. Run returns nil when ctx
// ends; an error when provisioning or the first discovery fails. Later
// rescans and provisioning that fail are logged (a PF's failure is its
// warning) and retried; a lost link event subscription is renewed. A burst
// of link events makes one rescan (debounce.Wait).
func (m *Manager) Run(ctx context.Context, publish func([]*devicev1.Device)) error {
	prov := newProvisioner(m.log, m.root, m.prepared, m.writeVFs)
	changed := m.changed()
	p, err := prov.provision(m.cfg.GetIfaces(), false)
	if err != nil {
		p.release()
		return fmt.Errorf("provisioning VFs: %w", err)
	}
	ev := &events{log: m.log, subscribe: m.subscribe}
	ev.start()
	defer ev.stop()
	t0 := time.Now()
	last, err := m.scan()
	if err != nil {
		p.release()
		return fmt.Errorf("discovering VFs: %w", err)
	}
	took := time.Since(t0)
	publish(last)
	p.release()
	m.log.Info("Published VFs", "count", len(last))
	warnings := p.warnings()
	m.sendReport(warnings)
	waiting := p.ifaces()
	tick := time.NewTicker(m.resync)
	defer tick.Stop()
	for {
		var freed <-chan struct{}
		if len(waiting) > 0 {
			freed = changed
		}
		if !m.waitRescan(ctx, ev, tick.C, freed, took) {
			return nil
		}
		var p provisioned
		if len(waiting) > 0 {
			changed = m.changed() // before looking: a Free from here on wakes the next wait
			p, _ = prov.provision(waiting, true)
			waiting = p.ifaces()
		}
		t0 := time.Now()
		devs, err := m.scan()
		took = time.Since(t0)
		if err != nil {
			p.release()
			m.log.Warn("Rescanning VFs", "error", err)
			continue
		}
		if !slices.EqualFunc(last, devs, func(a, b *devicev1.Device) bool { return proto.Equal(a, b) }) {
			publish(devs)
			m.log.Info("Published VFs", "count", len(devs))
			last = devs
		}
		p.release()
		if w := p.warnings(); !slices.Equal(w, warnings) {
			warnings = w
			m.sendReport(warnings)
		}
	}
}

// waitRescan waits for a reason to scan again: link events (a burst taken
// as one, the last scan having taken took), the resync tick (which also
// renews a lost event subscription) or freed closing. It returns false
// once ctx has ended.
func (m *Manager) waitRescan(ctx context.Context, ev *events, tick <-chan time.Time, freed <-chan struct{}, took time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case _, ok := <-ev.ch:
		if ok {
			// One rescan for a burst of events (our own moves make
			// several each).
			ok = debounce.Wait(ctx, ev.ch, manager.RescanQuiet, manager.RescanMaxAfter(took))
		}
		if !ok {
			m.log.Warn("Link event subscription ended; renewing it")
			ev.stop()
			ev.start()
		}
		ev.drain()
	case <-tick:
		if ev.ch == nil {
			ev.start()
		}
	case <-freed:
	}
	return ctx.Err() == nil
}

// changed is the Prepared's channel of the next change; nil (never ready)
// without a Prepared.
func (m *Manager) changed() <-chan struct{} {
	if m.prepared == nil {
		return nil
	}
	return m.prepared.Changed()
}

// sendReport hands the warnings to the report, if there is one.
func (m *Manager) sendReport(warnings []string) {
	if m.report != nil {
		m.report(warnings)
	}
}

// scan discovers the VFs and keeps those of the configured PFs.
func (m *Manager) scan() ([]*devicev1.Device, error) {
	devs, err := DiscoverPCI(m.root, m.cfg.GetSysBusPciDevPath())
	if err != nil || len(m.pfs) == 0 {
		return devs, err
	}
	return slices.DeleteFunc(devs, func(d *devicev1.Device) bool { return !m.pfs[d.GetPfName()] }), nil
}

// events is Run's link event subscription; ch is nil while there is none.
type events struct {
	log       *slog.Logger
	subscribe subscribeFunc
	done      chan struct{}
	ch        <-chan netlink.LinkUpdate
}

// start subscribes; on failure it logs and leaves ch nil (Run then relies
// on the resync and tries again on each tick).
func (e *events) start() {
	done := make(chan struct{})
	ch, err := e.subscribe(done)
	if err != nil {
		close(done)
		e.log.Warn("No link events; rescanning on the resync interval only", "error", err)
		return
	}
	e.done, e.ch = done, ch
}

// stop ends the subscription and waits for its channel to close.
func (e *events) stop() {
	if e.done == nil {
		return
	}
	close(e.done)
	for range e.ch {
	}
	e.done, e.ch = nil, nil
}

// drain discards the events already queued: one rescan covers them.
func (e *events) drain() {
	for {
		select {
		case _, ok := <-e.ch:
			if !ok {
				return // seen by Run's next select
			}
		default:
			return
		}
	}
}

// Setup records VF dev's current settings on its PF (and, when it has a
// kernel netdev, that link's identity) and applies the VF settings cfg sets,
// in this order: VLAN with QoS and protocol, MAC, spoof check, trust, link
// state, tx rates. Fields cfg leaves unset are not touched, nor are settings
// that already have the asked value; when cfg sets none, the PF is not
// asked at all and the prepared device has no original_vf (Free has
// nothing to restore). cfg is validated first (a *fielderr.Error). On any
// error every setting already changed is put back before Setup returns.
// The prepared device's original_vf is what Free restores; a VF bound to
// vfio-pci gets the device nodes of its IOMMU group (device_nodes), and a
// VF with an RDMA device that device's character devices, read from sysfs
// before anything changes. A VF whose cfg asks for vfio and that is not
// on vfio-pci is bound to it last, after its VF settings (prepare and
// bindVfio: what it was bound to is the prepared device's vfio_binding,
// and its device is the VF as bound to vfio-pci); when that fails, its
// VF settings are put back too.
func (m *Manager) Setup(ctx context.Context, dev *devicev1.Device, cfg *devicev1.DeviceConfig, _ string) (*devicev1.PreparedDevice, error) {
	if err := m.Validate(dev, cfg); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pd, err := m.prepare(dev, cfg)
	if err != nil {
		return nil, err
	}
	if !asksVF(cfg) {
		if err := m.bindVfio(ctx, pd); err != nil {
			return nil, err
		}
		return pd, nil
	}
	pf, vf, _ := vfOf(dev)
	log := m.log.With("device", dev.GetName(), "pf", pf, "vf", vf)
	cur, err := m.links.VF(pf, vf)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	pd.OriginalVf = snapshotOf(cur)
	steps, want, err := plan(cur, cfg)
	if err != nil {
		return nil, err
	}
	if err := applyVF(ctx, log, m.links, pf, vf, steps, cur, want); err != nil {
		return nil, fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	log.Debug("VF set up", "settings", len(steps))
	if err := m.bindVfio(ctx, pd); err != nil {
		if rerr := restoreVF(m.links, pf, vf, want, cur); rerr != nil {
			log.Error("VF settings left changed after a failed vfio bind", "error", err, "restoreError", rerr)
			return nil, errors.Join(err, fmt.Errorf("device %s: %w", dev.GetName(), rerr))
		}
		return nil, err
	}
	return pd, nil
}

// asksVF reports whether cfg sets any VF setting on the PF.
func asksVF(cfg *devicev1.DeviceConfig) bool {
	if cfg == nil {
		return false
	}
	return cfg.Vlan != nil || cfg.VlanQos != nil || cfg.GetVlanProto() != devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED ||
		cfg.GetMacAddress() != "" || cfg.SpoofChk != nil || cfg.Trust != nil ||
		cfg.GetLinkState() != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED || cfg.MinTxRate != nil || cfg.MaxTxRate != nil
}

// Free puts back every VF setting that differs from pd's original_vf
// (trying all of them and joining the errors), then, for a VF Setup bound
// to vfio-pci, its original driver and its netdev's identity
// (restoreDriver), even when the settings could not all be put back; the
// errors are joined. It is idempotent. A prepared device with neither
// original_vf nor vfio_binding has nothing to restore; a VF its PF no
// longer has (the VFs were re-created) has lost its settings and its
// binding with it: both are nil. A PF that is gone is ErrPFNotFound.
func (m *Manager) Free(ctx context.Context, pd *devicev1.PreparedDevice) error {
	if pd.GetOriginalVf() == nil && pd.GetVfioBinding() == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.Join(m.freeVF(pd), m.restoreDriver(ctx, pd))
}

// freeVF puts back the VF settings of pd's original_vf (see Free).
func (m *Manager) freeVF(pd *devicev1.PreparedDevice) error {
	if pd.GetOriginalVf() == nil {
		return nil
	}
	dev := pd.GetDevice()
	pf, vf, err := vfOf(dev)
	if err != nil {
		return err
	}
	log := m.log.With("device", dev.GetName(), "pf", pf, "vf", vf)
	cur, err := m.links.VF(pf, vf)
	if errors.Is(err, ErrVFNotFound) {
		log.Warn("VF is gone; nothing to restore", "error", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	if err := restoreVF(m.links, pf, vf, cur, stateOf(pd.GetOriginalVf(), cur)); err != nil {
		return fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	log.Debug("VF settings restored")
	return nil
}

// Validate checks the VF settings of cfg for dev without touching anything
// (see Setup): a bad value is a *fielderr.Error naming the field
// ("config.vlanQoS"); a dev that is not a VF with a PF, ErrNotVF. The mtu
// is checked against the PF's MTU in sysfs when it can be read.
func (m *Manager) Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	return validate(m.root, dev, cfg)
}
