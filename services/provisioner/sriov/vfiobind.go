package sriov

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// A VF whose claim asks for vfio is moved from its kernel driver to
// vfio-pci at Setup and back at Free, the standard way through the PCI
// bus's sysfs files: driver_override names the only driver the VF may be
// bound to next (vfio-pci at Setup; cleared at Free), <driver>/unbind
// releases it from the one it has, and drivers_probe binds it again (at
// Free, to the driver whose IDs match it, as when the VF was created). The
// kernel does the binding; the manager writes those files and then
// watches the VF's driver link (and its netdev, when bound back) until
// the kernel is done, within DefaultBindTimeout. Free never names a
// driver to the kernel: the original driver it records comes back from a
// claim's status, and is only what Free waits for.

// DefaultBindTimeout bounds each wait for the kernel to bind a VF to a
// driver (vfio-pci, or its own driver and that driver's netdev). Binding
// resets the VF, and a VF driver talks to its PF before it makes a netdev.
const DefaultBindTimeout = 10 * time.Second

// bindPoll is how often a wait reads sysfs again.
const bindPoll = 20 * time.Millisecond

// ErrBindTimeout means the kernel did not finish binding a VF within the
// bind timeout: not bound to the driver it was asked to (the driver's
// probe failed, or the driver is gone), or, bound back to its netdev
// driver, without a netdev.
var ErrBindTimeout = errors.New("the kernel did not finish binding the VF in time")

// noOverride is what a PCI device's driver_override reads when it names
// no driver.
const noOverride = "(null)"

// vfioOps is what the manager binds VFs with: a sysfs attribute write, the
// netlink calls that give a VF's netdev back its identity, and how long
// and how often it waits for the kernel. Tests replace the write with a
// fake kernel and the netdev calls with a fake.
type vfioOps struct {
	write   func(path, value string) error
	netdevs netdevs
	timeout time.Duration
	poll    time.Duration
}

func defaultVfioOps() vfioOps {
	return vfioOps{
		write:   func(path, value string) error { return os.WriteFile(path, []byte(value), 0) },
		netdevs: netlinkNetdevs{},
		timeout: DefaultBindTimeout,
		poll:    bindPoll,
	}
}

// withVfioOps replaces how VFs are bound (tests).
func withVfioOps(o vfioOps) Option { return func(m *Manager) { m.vfio = o } }

// netdevs sets a host link's identity.
type netdevs interface {
	// SetIdentity gives the host link called name the name, MAC, MTU (0:
	// left) and admin state of want, changing only what differs: a link
	// that already has them is left alone.
	SetIdentity(name string, want *devicev1.LinkSnapshot) error
}

// bindVfio binds pd's VF to vfio-pci when pd has a vfio_binding (prepare
// made it: the VF is on another driver, or on none), waits until the
// kernel has bound it and the VF has its IOMMU group, and gives pd the
// group's device nodes. On any failure, or when ctx ends first, it puts
// the VF back as vfio_binding records (restoreDriver) before it returns
// the error, joined with any error of that. Errors name the device.
func (m *Manager) bindVfio(ctx context.Context, pd *devicev1.PreparedDevice) error {
	b := pd.GetVfioBinding()
	if b == nil {
		return nil
	}
	dev := pd.GetDevice()
	dir := m.pciDevDir(dev.GetPciAddress())
	err := m.rebind(ctx, dir, dev.GetPciAddress(), VfioDriver, VfioDriver)
	if err == nil {
		pd.DeviceNodes, err = m.deviceNodes(dev)
	}
	if err == nil {
		m.log.Debug("VF bound to vfio-pci", "device", dev.GetName(), "originalDriver", b.GetOriginalDriver())
		return nil
	}
	err = fmt.Errorf("device %s: binding it to %s: %w", dev.GetName(), VfioDriver, err)
	if rerr := m.restoreDriver(context.WithoutCancel(ctx), pd); rerr != nil {
		m.log.Error("VF left off its driver after a failed vfio bind", "device", dev.GetName(), "error", err, "restoreError", rerr)
		return errors.Join(err, rerr)
	}
	return err
}

// restoreDriver puts pd's VF back as its vfio_binding records: on its
// original driver (or on none), with driver_override cleared, and its
// netdev, once the driver has made it again, under its original name with
// its original MAC, MTU and admin state. It does only what is not so
// already, so it is idempotent and finishes a restore that stopped half
// way. A VF that is gone (its VFs were re-created) has nothing to
// restore: nil. A vfio_binding that names no driver or link a VF can
// have had (pd comes from a claim's status) is a *fielderr.Error, before
// anything changes. Errors name the device.
func (m *Manager) restoreDriver(ctx context.Context, pd *devicev1.PreparedDevice) error {
	b := pd.GetVfioBinding()
	if b == nil {
		return nil
	}
	dev := pd.GetDevice()
	if err := checkBinding(b); err != nil {
		return fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	addr := dev.GetPciAddress()
	if !validPCIAddress(addr) {
		return fmt.Errorf("device %s: PCI address %q is not a PCI function's name", dev.GetName(), addr)
	}
	dir := m.pciDevDir(addr)
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		m.log.Warn("VF is gone; no driver to restore", "device", dev.GetName(), "pciAddress", addr)
		return nil
	}
	if err := m.rebind(ctx, dir, addr, "", b.GetOriginalDriver()); err != nil {
		return fmt.Errorf("device %s: binding it back to %s: %w", dev.GetName(), driverName(b.GetOriginalDriver()), err)
	}
	if err := m.clearOverride(dir); err != nil {
		return fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	if want := b.GetOriginalNetdev(); want != nil {
		if err := m.restoreNetdev(ctx, dir, want); err != nil {
			return fmt.Errorf("device %s: %w", dev.GetName(), err)
		}
	}
	m.log.Debug("VF back on its driver", "device", dev.GetName(), "driver", b.GetOriginalDriver())
	return nil
}

// rebind moves the PCI function addr (its sysfs directory dir) to the
// driver to, or to none when to is empty: driver_override set to override
// (cleared when empty), the function unbound from the driver it has, and,
// unless to is empty, drivers_probe asked to bind it; then it waits for
// the function's driver link to name to, and, for vfio-pci, for its
// iommu_group link. A function already on to is left as it is. An
// override stays set: a later probe (another driver loaded) cannot take
// the function from vfio-pci.
func (m *Manager) rebind(ctx context.Context, dir, addr, override, to string) error {
	cur, err := linkBase(filepath.Join(dir, "driver"))
	if err != nil {
		return err
	}
	if cur == to {
		return nil
	}
	if err := m.writeAttr(filepath.Join(dir, "driver_override"), override+"\n"); err != nil {
		return err
	}
	if cur != "" {
		if err := m.writeAttr(filepath.Join(dir, "driver", "unbind"), addr); err != nil {
			return err
		}
	}
	if to == "" {
		return m.await(ctx, "for the VF to be unbound", func() (bool, error) {
			d, err := linkBase(filepath.Join(dir, "driver"))
			return d == "", err
		})
	}
	if err := m.writeAttr(filepath.Join(filepath.Dir(m.pciDevices()), "drivers_probe"), addr); err != nil {
		return err
	}
	return m.await(ctx, "for the VF to be bound to "+to, func() (bool, error) {
		d, err := linkBase(filepath.Join(dir, "driver"))
		if err != nil || d != to {
			return false, err
		}
		if to != VfioDriver {
			return true, nil
		}
		_, err = os.Lstat(filepath.Join(dir, "iommu_group"))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	})
}

// clearOverride empties the driver_override of the PCI function at dir
// unless it is empty (a VF still on its driver after a bind that failed
// before its unbind keeps vfio-pci's).
func (m *Manager) clearOverride(dir string) error {
	path := filepath.Join(dir, "driver_override")
	cur, err := readString(path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && (cur == "" || cur == noOverride) {
		return nil
	}
	if err != nil {
		return err
	}
	return m.writeAttr(path, "\n")
}

// restoreNetdev waits for the VF at dir to have a netdev again (its
// driver makes it at bind) and gives it want's identity.
func (m *Manager) restoreNetdev(ctx context.Context, dir string, want *devicev1.LinkSnapshot) error {
	var name string
	err := m.await(ctx, "for the VF's driver to make its netdev", func() (bool, error) {
		var err error
		name, err = firstEntry(filepath.Join(dir, "net"))
		return name != "", err
	})
	if err != nil {
		return err
	}
	mac, _ := readString(filepath.Join(dir, "net", name, "address"))
	m.log.Debug("Restoring the VF's netdev", "netdev", name, "macAddress", mac, "as", want.GetName(), "originalMacAddress", want.GetMacAddress())
	if err := m.vfio.netdevs.SetIdentity(name, want); err != nil {
		return fmt.Errorf("restoring its netdev %s as %s: %w", name, want.GetName(), err)
	}
	return nil
}

// writeAttr writes value to the sysfs attribute path.
func (m *Manager) writeAttr(path, value string) error {
	if err := m.vfio.write(path, value); err != nil {
		return fmt.Errorf("writing %q to %s: %w", strings.TrimSuffix(value, "\n"), path, err)
	}
	return nil
}

// await polls done until it reports true or an error, or until the bind
// timeout (ErrBindTimeout) or ctx ends; what says what it waits for
// ("for the VF to be unbound").
func (m *Manager) await(ctx context.Context, what string, done func() (bool, error)) error {
	deadline := time.Now().Add(m.vfio.timeout)
	t := time.NewTicker(m.vfio.poll)
	defer t.Stop()
	for {
		ok, err := done()
		switch {
		case err != nil:
			return err
		case ok:
			return nil
		case time.Now().After(deadline):
			return fmt.Errorf("waited %v %s: %w", m.vfio.timeout, what, ErrBindTimeout)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting %s: %w", what, ctx.Err())
		case <-t.C:
		}
	}
}

// checkBinding checks what restoreDriver takes from a vfio_binding: a
// driver name that can be one name in the PCI bus's drivers/ (or none)
// and is not vfio-pci, and a netdev name and MAC a link can have.
func checkBinding(b *devicev1.VfioBinding) error {
	switch d := b.GetOriginalDriver(); {
	case len(d) > maxIfNameLen*4 || strings.ContainsAny(d, "/\x00\n") || d == "." || d == "..":
		return fielderr.New("vfioBinding.originalDriver", "%q is not a driver name", d)
	case d == VfioDriver:
		return fielderr.New("vfioBinding.originalDriver", "%q: a VF Setup bound to %s was on another driver", d, VfioDriver)
	}
	n := b.GetOriginalNetdev()
	if n == nil {
		return nil
	}
	if err := validateIfName("vfioBinding.originalNetdev.name", n.GetName()); err != nil {
		return err
	}
	if mac := n.GetMacAddress(); mac != "" {
		if _, err := net.ParseMAC(mac); err != nil {
			return fielderr.New("vfioBinding.originalNetdev.macAddress", "%q is not a MAC address", mac)
		}
	}
	return nil
}

// driverName is d for messages: "no driver" when empty.
func driverName(d string) string {
	if d == "" {
		return "no driver"
	}
	return d
}

// netlinkNetdevs is netdevs over rtnetlink in the host network namespace.
type netlinkNetdevs struct{}

var _ netdevs = netlinkNetdevs{}

// SetIdentity sets the link down while it renames it or changes its MAC
// (the kernel refuses a rename of a running link; some drivers a MAC
// change), then sets the admin state want has.
func (netlinkNetdevs) SetIdentity(name string, want *devicev1.LinkSnapshot) error {
	var mac net.HardwareAddr
	if s := want.GetMacAddress(); s != "" {
		var err error
		if mac, err = net.ParseMAC(s); err != nil {
			return fmt.Errorf("MAC %q: %w", s, err)
		}
	}
	h, err := dial()
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("looking up link %s: %w", name, err)
	}
	a := l.Attrs()
	up := a.Flags&net.FlagUp != 0
	newMAC := mac != nil && a.HardwareAddr.String() != mac.String()
	rename := a.Name != want.GetName()
	if up && (newMAC || rename || !want.GetUp()) {
		if err := h.LinkSetDown(l); err != nil {
			return fmt.Errorf("setting %s down: %w", name, err)
		}
		up = false
	}
	if newMAC {
		if err := h.LinkSetHardwareAddr(l, mac); err != nil {
			return fmt.Errorf("setting the MAC of %s to %s: %w", name, mac, err)
		}
	}
	if mtu := int(want.GetMtu()); mtu != 0 && a.MTU != mtu {
		if err := h.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("setting the MTU of %s to %d: %w", name, mtu, err)
		}
	}
	if rename {
		if err := h.LinkSetName(l, want.GetName()); err != nil {
			if errors.Is(err, unix.EEXIST) {
				return fmt.Errorf("renaming %s to %s: another link has that name: %w", name, want.GetName(), err)
			}
			return fmt.Errorf("renaming %s to %s: %w", name, want.GetName(), err)
		}
	}
	if want.GetUp() && !up {
		if err := h.LinkSetUp(l); err != nil {
			return fmt.Errorf("setting %s up: %w", want.GetName(), err)
		}
	}
	return nil
}
