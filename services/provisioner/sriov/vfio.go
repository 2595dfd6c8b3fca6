package sriov

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
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
// bound: true needs a VF bound to vfio-pci, false one with a netdev.
func validateVfio(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if cfg.Vfio == nil {
		return nil
	}
	bound := dev.GetDriver() == VfioDriver
	driver := dev.GetDriver()
	if driver == "" {
		driver = "no driver"
	}
	switch {
	case cfg.GetVfio() && !bound:
		return fielderr.New("config.vfio", "VF %s is bound to %s, not %s: it has no vfio device", dev.GetName(), driver, VfioDriver)
	case !cfg.GetVfio() && bound:
		return fielderr.New("config.vfio", "false, but VF %s is bound to %s: it has no netdev", dev.GetName(), VfioDriver)
	}
	return nil
}

// pciDevDir is the sysfs directory of the PCI function addr, in the PCI
// device list discovery reads.
func (m *Manager) pciDevDir(addr string) string {
	dir := m.cfg.GetSysBusPciDevPath()
	if dir == "" {
		dir = filepath.Join(m.root, "bus", "pci", "devices")
	}
	return filepath.Join(dir, addr)
}

// deviceNodes returns the device nodes dev needs in a container: those of
// its vfio group when it is bound to vfio-pci, its RDMA device's character
// devices when it has one (rdma.DeviceNodes), else none.
func (m *Manager) deviceNodes(dev *devicev1.Device) ([]*devicev1.DeviceNode, error) {
	if dev.GetDriver() != VfioDriver {
		return m.rdmaNodes(dev)
	}
	addr := dev.GetPciAddress()
	if addr == "" || strings.ContainsAny(addr, "/\x00") || addr == "." || addr == ".." {
		return nil, fmt.Errorf("device %s: PCI address %q: %w", dev.GetName(), addr, ErrNoIOMMUGroup)
	}
	nodes, err := vfioNodes(m.pciDevDir(addr), m.devRoot)
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
