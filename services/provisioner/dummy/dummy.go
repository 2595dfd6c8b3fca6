// Package dummy is the dummy device manager: it offers Linux dummy links
// dummy0..dummy<N-1>, where N is the configured count. The devices are
// virtual: the inventory is synthesised from the count alone, so it is
// published once and never changes, and no link exists for a device until a
// pod has it. Setup only records what the link will be; the provisioner
// creates the link directly inside the pod's network namespace at Attach and
// deletes it there at Detach (or the kernel does, with the namespace), so a
// dummy device costs no namespace move at all (moves are serialized by the
// kernel's RTNL lock). A link called dummyN in the host namespace is
// not the device and is left alone. Dummy links carry no traffic off the
// node: they are for testing the whole claim path and for workloads that
// only need an interface.
package dummy

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/shared/fielderr"
)

// MaxCount is the largest count a DummyConfig may ask for.
const MaxCount = 1024

// namePrefix is what every device (and link) name starts with; the index
// follows.
const namePrefix = "dummy"

// driver is the kernel driver of a dummy link, published so that pools can
// select dummy devices by driver as they select any other.
const driver = "dummy"

// Manager is the dummy device manager. Its methods are safe for concurrent
// use; Setup and Free on the same device must not overlap (the provisioner
// serializes calls per device).
type Manager struct {
	log   *slog.Logger
	count int
}

var _ manager.Manager = (*Manager)(nil)

// New returns a dummy manager for cfg. A count above MaxCount is a
// *fielderr.Error for the field "count" (relative to the config, as the
// provisioner's factories report it). A nil cfg offers no devices; cfg's
// enabled flag is the caller's business. A nil log discards.
func New(log *slog.Logger, cfg *provisionerv1.DummyConfig) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if n := cfg.GetCount(); n > MaxCount {
		return nil, fielderr.New("count", "%d is out of range 0..%d", n, MaxCount)
	}
	return &Manager{log: log, count: int(cfg.GetCount())}, nil
}

// Devices returns the manager's inventory, dummy0..dummy<count-1> in index
// order: what Run publishes.
func (m *Manager) Devices() []*devicev1.Device {
	devs := make([]*devicev1.Device, m.count)
	for i := range devs {
		name := namePrefix + strconv.Itoa(i)
		devs[i] = &devicev1.Device{
			Name:         name,
			Manager:      devicev1.DeviceManager_DEVICE_MANAGER_DUMMY,
			KernelIfName: name,
			Driver:       driver,
		}
	}
	return devs
}

// Run publishes the inventory at once and blocks until ctx ends; it then
// returns nil. The inventory depends on the configuration only, so there is
// nothing to watch.
func (m *Manager) Run(ctx context.Context, publish func([]*devicev1.Device)) error {
	publish(m.Devices())
	m.log.Debug("published dummy devices", "count", m.count)
	<-ctx.Done()
	return nil
}

// index returns the index of a device name this manager publishes, or
// false.
func (m *Manager) index(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, namePrefix)
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	if err != nil || i < 0 || i >= m.count {
		return 0, false
	}
	return i, true
}

// checkDevice checks that dev is one of this manager's devices.
func (m *Manager) checkDevice(dev *devicev1.Device) error {
	if k := dev.GetManager(); k != devicev1.DeviceManager_DEVICE_MANAGER_DUMMY {
		return fielderr.New("device.manager", "%v is not the dummy manager", k)
	}
	if _, ok := m.index(dev.GetName()); !ok {
		return fielderr.New("device.name", "%q is not a device of the dummy manager (%s)", dev.GetName(), m.rangeText())
	}
	if k := dev.GetKernelIfName(); k != dev.GetName() {
		return fielderr.New("device.kernelIfName", "%q is not the device name %q", k, dev.GetName())
	}
	return nil
}

func (m *Manager) rangeText() string {
	switch m.count {
	case 0:
		return "it offers none"
	case 1:
		return namePrefix + "0"
	}
	return fmt.Sprintf("%s0..%s%d", namePrefix, namePrefix, m.count-1)
}
