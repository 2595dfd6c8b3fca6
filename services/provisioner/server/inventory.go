package server

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

// allManagers are the managers in the order WatchDevices reports them.
var allManagers = []devicev1.DeviceManager{
	devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
	devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
	devicev1.DeviceManager_DEVICE_MANAGER_HOST,
	devicev1.DeviceManager_DEVICE_MANAGER_SUBIF,
}

// inventory is each manager's latest published devices and warnings, with
// a version per manager and a broadcast channel closed at every change.
type inventory struct {
	mu      sync.Mutex
	devices map[devicev1.DeviceManager][]*devicev1.Device
	// reported is what a running manager last reported it does not do as
	// configured; failure why the manager's Run stopped ("" while it runs).
	reported map[devicev1.DeviceManager][]string
	failure  map[devicev1.DeviceManager]string
	version  map[devicev1.DeviceManager]uint64
	wake     chan struct{}
	done     chan struct{}
	closed   bool
}

func newInventory() *inventory {
	return &inventory{
		devices:  map[devicev1.DeviceManager][]*devicev1.Device{},
		reported: map[devicev1.DeviceManager][]string{},
		failure:  map[devicev1.DeviceManager]string{},
		version:  map[devicev1.DeviceManager]uint64{},
		wake:     make(chan struct{}),
		done:     make(chan struct{}),
	}
}

// close ends every watch. Idempotent.
func (inv *inventory) close() {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if !inv.closed {
		inv.closed = true
		close(inv.done)
	}
}

// set records m's devices; an unchanged list wakes nobody.
func (inv *inventory) set(m devicev1.DeviceManager, devs []*devicev1.Device) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if _, known := inv.version[m]; known && slices.EqualFunc(inv.devices[m], devs, func(a, b *devicev1.Device) bool { return proto.Equal(a, b) }) {
		return
	}
	for _, d := range devs {
		d.Manager = m
	}
	inv.devices[m] = devs
	inv.bumpLocked(m)
}

// bumpLocked makes m's current devices and warnings a new version.
func (inv *inventory) bumpLocked(m devicev1.DeviceManager) {
	inv.version[m]++
	close(inv.wake)
	inv.wake = make(chan struct{})
}

// report records what m reports it does not do as configured; an
// unchanged list wakes nobody.
func (inv *inventory) report(m devicev1.DeviceManager, warnings []string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if slices.Equal(inv.reported[m], warnings) {
		return
	}
	inv.reported[m] = slices.Clone(warnings)
	inv.bumpLocked(m)
}

// setFailure records why m's Run stopped, which replaces what it reported;
// "" clears it (a new instance runs).
func (inv *inventory) setFailure(m devicev1.DeviceManager, why string) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.failure[m] == why && (why == "" || len(inv.reported[m]) == 0) {
		return
	}
	inv.failure[m] = why
	if why != "" {
		inv.reported[m] = nil
	}
	inv.bumpLocked(m)
}

// clearWarnings forgets m's warnings and failure (it was disabled).
func (inv *inventory) clearWarnings(m devicev1.DeviceManager) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	if inv.reported[m] == nil && inv.failure[m] == "" {
		return
	}
	delete(inv.reported, m)
	delete(inv.failure, m)
	inv.bumpLocked(m)
}

// warningsLocked is m's warnings as WatchDevices sends them: what it
// reported, then why it stopped.
func (inv *inventory) warningsLocked(m devicev1.DeviceManager) []string {
	out := slices.Clone(inv.reported[m])
	if f := inv.failure[m]; f != "" {
		out = append(out, "stopped: "+f)
	}
	return out
}

// warnings is m's warnings (warningsLocked).
func (inv *inventory) warnings(m devicev1.DeviceManager) []string {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	return inv.warningsLocked(m)
}

// find returns m's device called name.
func (inv *inventory) find(m devicev1.DeviceManager, name string) (*devicev1.Device, bool) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	for _, d := range inv.devices[m] {
		if d.GetName() == name {
			return d, true
		}
	}
	return nil, false
}

// changedSince returns the managers whose version differs from seen (every
// manager for a nil seen), their devices, and the channel closed at the
// next change. It updates seen.
func (inv *inventory) changedSince(seen map[devicev1.DeviceManager]uint64) ([]*provisionerv1.WatchDevicesResponse, <-chan struct{}) {
	inv.mu.Lock()
	defer inv.mu.Unlock()
	var out []*provisionerv1.WatchDevicesResponse
	for _, m := range allManagers {
		v := inv.version[m]
		if last, ok := seen[m]; ok && last == v {
			continue
		}
		seen[m] = v
		out = append(out, &provisionerv1.WatchDevicesResponse{Manager: m, Devices: inv.devices[m], Warnings: inv.warningsLocked(m)})
	}
	return out, inv.wake
}

// watch sends every manager's inventory and warnings at once, then each
// manager's again whenever either changes, until ctx ends or send fails.
func (inv *inventory) watch(ctx context.Context, send func(*provisionerv1.WatchDevicesResponse) error) error {
	seen := map[devicev1.DeviceManager]uint64{}
	for {
		batch, wake := inv.changedSince(seen)
		for _, r := range batch {
			if err := send(r); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-inv.done:
			return errShutdown
		case <-wake:
		}
	}
}
