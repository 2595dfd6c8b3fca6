package server

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
)

// Factories build the managers from their configuration. A factory returns
// a *fielderr.Error (field relative to its config) for a bad config. The
// sr-iov and host factories get the sysfs root Configure named, checked to
// be an existing directory, or "" for the provisioner's default. The
// sr-iov factory also gets the server's knowledge of the prepared VFs
// (sriov.WithPrepared) and where the manager reports the PFs whose count
// waits (sriov.WithReport; called from its Run only).
type Factories struct {
	Sriov func(sysfsRoot string, cfg *provisionerv1.SriovConfig, prepared PreparedVFs, report func(warnings []string)) (manager.Manager, error)
	Dummy func(*provisionerv1.DummyConfig) (manager.Manager, error)
	Host  func(sysfsRoot string, cfg *provisionerv1.HostConfig) (manager.Manager, error)
	Subif func(*provisionerv1.SubifConfig) (manager.Manager, error)
}

// running is one started manager.
type running struct {
	mgr    manager.Manager
	config proto.Message
	// sysfsRoot is the root it was built with ("" for a manager that
	// reads no sysfs).
	sysfsRoot string
	cancel    context.CancelFunc
	done      chan struct{}
	// published is closed at the manager's first publication: from then
	// on the inventory holds what this instance offers (Restore waits
	// for it).
	published     chan struct{}
	publishedOnce sync.Once
	// failed is why Run returned early, if it did.
	failed atomic.Pointer[error]
}

func (r *running) err() error {
	if p := r.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// managers starts, stops and reconfigures the device managers, without a
// restart of the process.
type managers struct {
	log *slog.Logger
	inv *inventory
	new Factories
	vfs *preparedVFs

	mu      sync.Mutex
	running map[devicev1.DeviceManager]*running
	// last keeps the latest instance of every manager ever started, so a
	// device prepared before its manager was disabled can still be freed.
	last map[devicev1.DeviceManager]manager.Manager
	// configured is closed at the first Configure that applied.
	configured     chan struct{}
	configuredOnce sync.Once
}

// configureWait bounds how long a call to a provisioner that just started
// waits for its first Configure (dra configures it again within about a
// second of a restart), so that a Setup or Free arriving in between rides
// the restart out instead of failing.
const configureWait = 10 * time.Second

// awaitConfigured waits for the first Configure since the process started,
// at most configureWait; past it the call fails with codes.Unavailable
// (callers try again while the provisioner restarts).
func (ms *managers) awaitConfigured(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, configureWait)
	defer cancel()
	select {
	case <-ms.configured:
		return nil
	case <-ctx.Done():
		return status.Error(codes.Unavailable, "the provisioner has not been configured since it started (dra configures it)")
	}
}

// wanted is one manager's desired state from a Configure.
type wanted struct {
	kind      devicev1.DeviceManager
	field     string
	config    proto.Message // nil when disabled
	sysfsRoot string
	build     func() (manager.Manager, error)
}

func (ms *managers) wanted(cfg *provisionerv1.ManagerConfigs, sysfsRoot string) []wanted {
	w := []wanted{
		{kind: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, field: "managers.sriov", sysfsRoot: sysfsRoot,
			build: func() (manager.Manager, error) {
				return ms.new.Sriov(sysfsRoot, cfg.GetSriov(), ms.vfs, func(w []string) {
					ms.inv.report(devicev1.DeviceManager_DEVICE_MANAGER_SRIOV, w)
				})
			}},
		{kind: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY, field: "managers.dummy",
			build: func() (manager.Manager, error) { return ms.new.Dummy(cfg.GetDummy()) }},
		{kind: devicev1.DeviceManager_DEVICE_MANAGER_HOST, field: "managers.host", sysfsRoot: sysfsRoot,
			build: func() (manager.Manager, error) { return ms.new.Host(sysfsRoot, cfg.GetHost()) }},
		{kind: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF, field: "managers.subif",
			build: func() (manager.Manager, error) { return ms.buildSubif(cfg.GetSubif()) }},
	}
	if cfg.GetSriov().GetEnabled() {
		w[0].config = cfg.GetSriov()
	}
	if cfg.GetDummy().GetEnabled() {
		w[1].config = cfg.GetDummy()
	}
	if cfg.GetHost().GetEnabled() {
		w[2].config = cfg.GetHost()
	}
	if cfg.GetSubif().GetEnabled() {
		w[3].config = cfg.GetSubif()
	}
	return w
}

// configure builds every enabled manager whose config (or sysfs root)
// changed, then, only when all of them built, stops the replaced and
// disabled ones and starts the new ones. A bad config changes nothing.
func (ms *managers) configure(cfg *provisionerv1.ManagerConfigs, sysfsRoot string) ([]*provisionerv1.ManagerStatus, error) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	built := map[devicev1.DeviceManager]manager.Manager{}
	wanted := ms.wanted(cfg, sysfsRoot)
	for _, w := range wanted {
		if w.config == nil {
			continue
		}
		if r := ms.running[w.kind]; r != nil && proto.Equal(r.config, w.config) && r.sysfsRoot == w.sysfsRoot && r.err() == nil {
			continue
		}
		m, err := w.build()
		if err != nil {
			return nil, fielderr.Prefix(w.field, err)
		}
		built[w.kind] = m
	}
	for _, w := range wanted {
		r := ms.running[w.kind]
		_, rebuilt := built[w.kind]
		if r != nil && (w.config == nil || rebuilt) {
			ms.stopLocked(w.kind, r)
		}
		if w.config == nil {
			ms.inv.set(w.kind, nil)
			ms.inv.clearWarnings(w.kind)
		}
		if rebuilt {
			ms.startLocked(w.kind, built[w.kind], w.config, w.sysfsRoot)
		}
	}
	ms.configuredOnce.Do(func() { close(ms.configured) })
	return ms.statusLocked(), nil
}

func (ms *managers) startLocked(kind devicev1.DeviceManager, m manager.Manager, cfg proto.Message, sysfsRoot string) {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{mgr: m, config: cfg, sysfsRoot: sysfsRoot, cancel: cancel, done: make(chan struct{}), published: make(chan struct{})}
	ms.running[kind], ms.last[kind] = r, m
	ms.inv.setFailure(kind, "")
	log := ms.log.With("manager", kind.String())
	go func() {
		defer close(r.done)
		err := m.Run(ctx, func(devs []*devicev1.Device) {
			if ctx.Err() == nil {
				ms.inv.set(kind, devs)
				r.publishedOnce.Do(func() { close(r.published) })
			}
		})
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = fmt.Errorf("manager returned")
		}
		log.Error("Manager stopped", "error", err)
		r.failed.Store(&err)
		ms.inv.setFailure(kind, err.Error())
	}()
	log.Info("Manager started")
}

func (ms *managers) stopLocked(kind devicev1.DeviceManager, r *running) {
	r.cancel()
	<-r.done
	delete(ms.running, kind)
	ms.log.Info("Manager stopped", "manager", kind.String())
}

func (ms *managers) statusLocked() []*provisionerv1.ManagerStatus {
	var out []*provisionerv1.ManagerStatus
	for _, kind := range allManagers {
		st := &provisionerv1.ManagerStatus{Manager: kind}
		if r := ms.running[kind]; r != nil {
			st.Running = r.err() == nil
			if r.err() != nil {
				st.Message = r.err().Error()
			}
		} else {
			st.Message = "disabled"
		}
		out = append(out, st)
	}
	return out
}

// forSetup returns the running manager of kind.
func (ms *managers) forSetup(kind devicev1.DeviceManager) (manager.Manager, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	r := ms.running[kind]
	if r == nil || r.err() != nil {
		return nil, false
	}
	return r.mgr, true
}

// forFree returns the latest instance of kind, running or not.
func (ms *managers) forFree(kind devicev1.DeviceManager) (manager.Manager, bool) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.last[kind]
	return m, ok
}

// stopAll stops every manager.
func (ms *managers) stopAll() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for kind, r := range ms.running {
		ms.stopLocked(kind, r)
	}
}
