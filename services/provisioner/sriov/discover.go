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

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// pciEthernetClass is the PCI class and subclass of an Ethernet controller
// (the top 16 bits of the 24-bit class code sysfs prints as 0x020000).
const pciEthernetClass = 0x0200

// Discover walks <sysfsRoot>/bus/pci/devices and returns every SR-IOV
// virtual function of an Ethernet controller (class 0x0200xx with a physfn
// link), sorted by name. It only reads sysfs. A VF bound to vfio-pci (or to
// no driver) has no kernel interface, MAC or MTU; a device that vanishes
// while Discover reads it is left out. An error means the PCI device list
// itself, or a device that is there, could not be read.
func Discover(sysfsRoot string) ([]*devicev1.Device, error) {
	dir := filepath.Join(sysfsRoot, "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	devicesDir, err := filepath.EvalSymlinks(filepath.Join(sysfsRoot, "devices"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("resolving %s/devices: %w", sysfsRoot, err)
	}
	var out []*devicev1.Device
	for _, e := range entries {
		d, err := readVF(filepath.Join(dir, e.Name()), e.Name(), devicesDir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // removed under us
		case err != nil:
			return nil, fmt.Errorf("PCI device %s: %w", e.Name(), err)
		case d != nil:
			out = append(out, d)
		}
	}
	slices.SortFunc(out, func(a, b *devicev1.Device) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// deviceName is the published name of the PCI function addr: the address
// with ':' and '.' replaced by '-' (0000:03:00.1 is 0000-03-00-1).
func deviceName(addr string) string {
	return strings.NewReplacer(":", "-", ".", "-").Replace(addr)
}

// readVF reads the PCI device at path (the bus/pci/devices link named
// addr). It returns nil, nil for a device that is not an Ethernet VF.
func readVF(path, addr, devicesDir string) (*devicev1.Device, error) {
	class, err := readHex(filepath.Join(path, "class"))
	if err != nil {
		return nil, err
	}
	if class>>8 != pciEthernetClass {
		return nil, nil
	}
	if _, err := os.Lstat(filepath.Join(path, "physfn")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // a PF or a plain NIC
		}
		return nil, err
	}
	d := &devicev1.Device{
		Name:       deviceName(addr),
		Manager:    devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		PciAddress: addr,
	}
	if d.VendorId, err = readString(filepath.Join(path, "vendor")); err != nil {
		return nil, err
	}
	if d.DeviceId, err = readString(filepath.Join(path, "device")); err != nil {
		return nil, err
	}
	if d.Driver, err = linkBase(filepath.Join(path, "driver")); err != nil {
		return nil, err
	}
	if d.KernelIfName, err = firstEntry(filepath.Join(path, "net")); err != nil {
		return nil, err
	}
	if d.PfName, err = pfNetdev(filepath.Join(path, "physfn", "net")); err != nil {
		return nil, err
	}
	idx, err := vfIndex(filepath.Join(path, "physfn"), addr)
	if err != nil {
		return nil, err
	}
	if idx >= 0 {
		d.VfIndex = new(int32(idx))
	}
	if d.NumaNode, err = numaNode(filepath.Join(path, "numa_node")); err != nil {
		return nil, err
	}
	d.PcieRoot = pcieRoot(path, devicesDir)
	if d.KernelIfName != "" {
		if err := readNetdev(d, filepath.Join(path, "net", d.KernelIfName)); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// readNetdev fills d's MAC and MTU from the net class directory dir; missing
// files leave them empty.
func readNetdev(d *devicev1.Device, dir string) error {
	mac, err := readString(filepath.Join(dir, "address"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	d.MacAddress = mac
	if d.LinkState, err = readLinkState(dir); err != nil {
		return err
	}
	mtu, err := readString(filepath.Join(dir, "mtu"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := strconv.ParseUint(mtu, 10, 32)
	if err != nil {
		return fmt.Errorf("%s/mtu: %w", dir, err)
	}
	d.Mtu = uint32(n)
	return nil
}

// vfIndex returns N of the virtfnN link of the PF directory pf that points
// at addr, or -1 when none does.
func vfIndex(pf, addr string) (int, error) {
	links, err := filepath.Glob(filepath.Join(pf, "virtfn*"))
	if err != nil {
		return -1, err
	}
	for _, l := range links {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(l), "virtfn"))
		if err != nil {
			continue
		}
		target, err := os.Readlink(l)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return -1, err
		}
		if filepath.Base(target) == addr {
			return n, nil
		}
	}
	return -1, nil
}

// numaNode reads a numa_node file: nil when missing or -1 (no affinity).
func numaNode(path string) (*int32, error) {
	s, err := readString(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if n < 0 {
		return nil, nil
	}
	return new(int32(n)), nil
}

// pcieRoot returns the first element of the device's resolved path under
// /sys/devices when it is a PCI root (pci0000:00), or "".
func pcieRoot(path, devicesDir string) string {
	if devicesDir == "" {
		return ""
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(devicesDir, real)
	if err != nil || !filepath.IsLocal(rel) {
		return ""
	}
	root, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
	if !strings.HasPrefix(root, "pci") {
		return ""
	}
	return root
}

// pfNetdev returns the PF's netdev from its net directory dir. In
// switchdev mode a PF's directory also lists its VF representors; the
// uplink is the one whose phys_port_name is "p<N>". Otherwise it is the
// first entry.
func pfNetdev(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if len(entries) > 1 {
		for _, e := range entries {
			port, _ := readString(filepath.Join(dir, e.Name(), "phys_port_name"))
			if n, ok := strings.CutPrefix(port, "p"); ok && n != "" && strings.Trim(n, "0123456789") == "" {
				return e.Name(), nil
			}
		}
	}
	return entries[0].Name(), nil
}

// firstEntry returns the first name in dir in lexical order, or "" when dir
// is missing or empty.
func firstEntry(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if len(entries) == 0 {
		return "", nil
	}
	return entries[0].Name(), nil
}

// linkBase returns the base name of the symlink at path's target, or ""
// when there is no link.
func linkBase(path string) (string, error) {
	target, err := os.Readlink(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return filepath.Base(target), nil
}

func readString(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func readHex(path string) (uint64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(s, "0x"), 16, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}

func readUint(path string) (uint64, error) {
	s, err := readString(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	return n, nil
}
