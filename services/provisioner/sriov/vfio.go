package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/rdma"
	"github.com/netdra/netdra/shared/fielderr"
)

// A VF bound to vfio-pci has no netdev: a DPDK application uses it through
// the vfio character devices of its IOMMU group, which the pod gets through
// CDI (dra writes them into the claim's CDI spec from the prepared device's
// device_nodes).

// VfioDriver is the kernel driver of a VF that is used through vfio.
const VfioDriver = "vfio-pci"

// DefaultDevRoot is where the host's device nodes are: the host paths of
// the device nodes are under it. The provisioner never opens them (the
// container runtime does), so it needs no /dev of the host.
const DefaultDevRoot = "/dev"

// noiommuName is the name sysfs gives an IOMMU group that the vfio module
// made up in its unsafe no-IOMMU mode (enable_unsafe_noiommu_mode, a VM
// without a vIOMMU); its device node is /dev/vfio/noiommu-<group>.
const noiommuName = "vfio-noiommu"

// vfioNodes returns the device nodes a container needs to use the
// vfio-bound PCI function at pciDev (its directory in sysfs): the group's
// node, <devRoot>/vfio/<group> (or noiommu-<group>), and the vfio
// container node, <devRoot>/vfio/vfio; in the container they are under
// /dev/vfio with the same names, as DPDK opens them. The group is the
// base name of the function's iommu_group link.
func vfioNodes(pciDev, devRoot string) ([]*devicev1.DeviceNode, error) {
	link := filepath.Join(pciDev, "iommu_group")
	target, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("bound to %s but has no IOMMU group (no %s): %w", VfioDriver, link, ErrNoIOMMUGroup)
	}
	if err != nil {
		return nil, fmt.Errorf("reading its IOMMU group: %w", err)
	}
	group := filepath.Base(target)
	if _, err := strconv.ParseUint(group, 10, 32); err != nil {
		return nil, fmt.Errorf("%s points to %q, not an IOMMU group number: %w", link, target, ErrNoIOMMUGroup)
	}
	name, err := readString(filepath.Join(link, "name"))
	switch {
	case err == nil && name == noiommuName:
		group = "noiommu-" + group
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("reading the name of IOMMU group %s: %w", group, err)
	}
	return []*devicev1.DeviceNode{
		{HostPath: filepath.Join(devRoot, "vfio", group), Path: "/dev/vfio/" + group},
		{HostPath: filepath.Join(devRoot, "vfio", "vfio"), Path: "/dev/vfio/vfio"},
	}, nil
}

// validateVfio checks what the claim's vfio asks against how dev is
// bound: true takes any VF (Setup binds one that is not on vfio-pci to
// it), but then nothing that only a netdev takes (validateNoNetdev);
// false refuses a VF bound to vfio-pci (it has no netdev to give). What
// needs sysfs (the VF's IOMMU group, the vfio-pci driver) Setup checks
// (prepare).
func validateVfio(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	switch {
	case cfg.Vfio == nil:
		return nil
	case cfg.GetVfio() && dev.GetDriver() != VfioDriver:
		return validateNoNetdev(vfioBound(dev), cfg)
	case !cfg.GetVfio() && dev.GetDriver() == VfioDriver:
		return fielderr.New("config.vfio", "false, but VF %s is bound to %s: it has no netdev", dev.GetName(), VfioDriver)
	}
	return nil
}

// vfioBound is dev as discovery sees it once bound to vfio-pci: no kernel
// interface, MAC, MTU, link state or RDMA device.
func vfioBound(dev *devicev1.Device) *devicev1.Device {
	d := proto.CloneOf(dev)
	d.Driver = VfioDriver
	d.KernelIfName, d.MacAddress, d.Mtu, d.RdmaDevice = "", "", 0, ""
	d.LinkState = devicev1.LinkState_LINK_STATE_UNSPECIFIED
	return d
}

// pciDevices is the PCI device list discovery reads: the configured
// sysBusPciDevPath, or <sysfs root>/bus/pci/devices. Its parent is the PCI
// bus's directory (drivers/, drivers_probe).
func (m *Manager) pciDevices() string {
	if dir := m.cfg.GetSysBusPciDevPath(); dir != "" {
		return dir
	}
	return filepath.Join(m.root, "bus", "pci", "devices")
}

// pciDevDir is the sysfs directory of the PCI function addr, in the PCI
// device list discovery reads.
func (m *Manager) pciDevDir(addr string) string {
	return filepath.Join(m.pciDevices(), addr)
}

// validPCIAddress reports whether addr can be one name in the PCI device
// list: not empty, not a path, not a dot name.
func validPCIAddress(addr string) bool {
	return addr != "" && !strings.ContainsAny(addr, "/\x00") && addr != "." && addr != ".."
}

// prepare returns the prepared device Setup starts from, read before
// anything changes. For a VF that stays as it is bound: dev, its
// identity as original_link when it has a netdev, and its device nodes
// (deviceNodes). For a VF whose claim asks for vfio and that is not on
// vfio-pci: dev as it will be once Setup binds it (vfioBound), with a
// vfio_binding that records its driver and its netdev's identity, and
// no device nodes yet (bindVfio adds them). Such a VF is refused, with a
// *fielderr.Error naming config.vfio, when the node has no vfio-pci
// driver or the VF no IOMMU group; and any VF whose claim asks for vfio
// when its IOMMU group holds another device, which the pod would get too.
func (m *Manager) prepare(dev *devicev1.Device, cfg *devicev1.DeviceConfig) (*devicev1.PreparedDevice, error) {
	bind := cfg.GetVfio() && dev.GetDriver() != VfioDriver
	if cfg.GetVfio() {
		if err := m.checkVfio(dev, bind); err != nil {
			return nil, err
		}
	}
	var err error
	pd := &devicev1.PreparedDevice{Device: proto.CloneOf(dev)}
	if bind {
		pd.Device = vfioBound(dev)
		pd.VfioBinding = &devicev1.VfioBinding{OriginalDriver: dev.GetDriver()}
	} else if pd.DeviceNodes, err = m.deviceNodes(dev); err != nil {
		return nil, err
	}
	if name := dev.GetKernelIfName(); name != "" {
		snap, err := m.links.Link(name)
		if err != nil {
			return nil, fmt.Errorf("device %s: %w", dev.GetName(), err)
		}
		if bind {
			pd.VfioBinding.OriginalNetdev = snap
		} else {
			pd.OriginalLink = snap
		}
	}
	return pd, nil
}

// NotReady says why dev, a VF claimed with cfg as a netdev, cannot be set
// up yet: the inventory lists it with no netdev but with a kernel driver
// that makes one, so the driver is registering it (igbvf does so again
// after the VF was reset, when the last claim freed it) and the inventory
// has not caught up. The error wraps manager.ErrNotReady, for the caller
// to try again once the inventory has the netdev. A VF claimed for vfio,
// or with no driver or a userspace one (never a netdev), is ready: nil.
// The server asks before Setup; Setup itself does not, so that a VF whose
// netdev sits in another namespace can still have its settings applied
// through its PF.
func NotReady(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	drv := dev.GetDriver()
	if cfg.GetVfio() || dev.GetKernelIfName() != "" || drv == "" || drv == VfioDriver || slices.Contains(userspaceDrivers, drv) {
		return nil
	}
	return fmt.Errorf("device %s: VF has no network interface yet (its driver %s has not registered one): %w", dev.GetName(), drv, manager.ErrNotReady)
}

// userspaceDrivers are the PCI drivers besides vfio-pci that hand a
// device to userspace: a VF on one never has a netdev.
var userspaceDrivers = []string{"uio_pci_generic", "igb_uio"}

// checkVfio checks in sysfs that dev can be given to a pod through vfio:
// its IOMMU group holds no other device; and, when Setup is to bind it
// (bind), that the node has the vfio-pci driver and the VF an IOMMU group.
// A VF already on vfio-pci with no group is left to deviceNodes
// (ErrNoIOMMUGroup).
func (m *Manager) checkVfio(dev *devicev1.Device, bind bool) error {
	if !validPCIAddress(dev.GetPciAddress()) {
		return fmt.Errorf("device %s: PCI address %q: %w", dev.GetName(), dev.GetPciAddress(), ErrNoIOMMUGroup)
	}
	if bind {
		drv := filepath.Join(filepath.Dir(m.pciDevices()), "drivers", VfioDriver)
		if _, err := os.Stat(drv); errors.Is(err, fs.ErrNotExist) {
			return fielderr.New("config.vfio", "the node has no %s driver (%s is missing: is the vfio-pci module loaded?)", VfioDriver, drv)
		} else if err != nil {
			return fmt.Errorf("device %s: %w", dev.GetName(), err)
		}
	}
	addr := dev.GetPciAddress()
	group := filepath.Join(m.pciDevDir(addr), "iommu_group")
	members, err := os.ReadDir(filepath.Join(group, "devices"))
	switch {
	case errors.Is(err, fs.ErrNotExist) && !bind:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fielderr.New("config.vfio", "VF %s has no IOMMU group (no %s): the node's IOMMU is off or does not cover it, and vfio gives a pod a device only through its IOMMU group", dev.GetName(), group)
	case err != nil:
		return fmt.Errorf("device %s: reading its IOMMU group: %w", dev.GetName(), err)
	}
	var others []string
	for _, e := range members {
		if e.Name() != addr {
			others = append(others, e.Name())
		}
	}
	if len(others) > 0 {
		return fielderr.New("config.vfio", "VF %s shares its IOMMU group with %s: the pod would get access to those devices too", dev.GetName(), strings.Join(others, ", "))
	}
	return nil
}

// deviceNodes returns the device nodes dev needs in a container: those of
// its vfio group when it is bound to vfio-pci, its RDMA device's character
// devices when it has one (rdma.DeviceNodes), else none.
func (m *Manager) deviceNodes(dev *devicev1.Device) ([]*devicev1.DeviceNode, error) {
	if dev.GetDriver() != VfioDriver {
		return m.rdmaNodes(dev)
	}
	if !validPCIAddress(dev.GetPciAddress()) {
		return nil, fmt.Errorf("device %s: PCI address %q: %w", dev.GetName(), dev.GetPciAddress(), ErrNoIOMMUGroup)
	}
	nodes, err := vfioNodes(m.pciDevDir(dev.GetPciAddress()), m.devRoot)
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	return nodes, nil
}

// rdmaNodes returns the character devices of dev's RDMA device, if it has
// one.
func (m *Manager) rdmaNodes(dev *devicev1.Device) ([]*devicev1.DeviceNode, error) {
	if dev.GetRdmaDevice() == "" {
		return nil, nil
	}
	nodes, err := rdma.DeviceNodes(m.root, m.devRoot, dev.GetRdmaDevice())
	if err != nil {
		return nil, fmt.Errorf("device %s: %w", dev.GetName(), err)
	}
	return nodes, nil
}
