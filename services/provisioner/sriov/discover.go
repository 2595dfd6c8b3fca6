package sriov

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/pcitopo"
	"github.com/netdra/netdra/services/provisioner/rdma"
)

// pciEthernetClass is the PCI class and subclass of an Ethernet controller
// (the top 16 bits of the 24-bit class code sysfs prints as 0x020000).
const pciEthernetClass = 0x0200

// Discover walks <sysfsRoot>/bus/pci/devices and returns every SR-IOV
// virtual function of an Ethernet controller (class 0x0200xx with a physfn
// link), sorted by name. It only reads sysfs. A VF bound to vfio-pci (or to
// no driver) has no kernel interface, MAC, MTU or RDMA device (a VF with a
// netdev has the RDMA device of its infiniband/ entry, if any); a device that vanishes
// while Discover reads it is left out. An error means the PCI device list
// itself, or a device that is there, could not be read.
func Discover(sysfsRoot string) ([]*devicev1.Device, error) {
	return DiscoverPCI(sysfsRoot, "")
}

// DiscoverPCI is Discover with the PCI devices listed in pciDir instead
// of <sysfsRoot>/bus/pci/devices (when pciDir is not empty).
func DiscoverPCI(sysfsRoot, pciDir string) ([]*devicev1.Device, error) {
	dir := cmp.Or(pciDir, filepath.Join(sysfsRoot, "bus", "pci", "devices"))
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing PCI devices: %w", err)
	}
	sysfs := pcitopo.TreeListing(sysfsRoot, pciDir)
	var out []*devicev1.Device
	pfs := pfCache{}
	for _, e := range entries {
		d, err := readVF(filepath.Join(dir, e.Name()), e.Name(), sysfs, pfs)
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
// addr, in the tree sysfs). It returns nil, nil for a device that is not an
// Ethernet VF. pfs holds what this discovery read of the PFs so far.
func readVF(path, addr string, sysfs fs.ReadLinkFS, pfs pfCache) (*devicev1.Device, error) {
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
	pf, err := pfs.get(filepath.Join(path, "physfn"))
	if err != nil {
		return nil, err
	}
	d.PfName = pf.netdev
	if idx, ok := pf.vfs[addr]; ok {
		d.VfIndex = new(int32(idx))
	}
	at, err := pcitopo.Read(sysfs, addr)
	if err != nil {
		return nil, err
	}
	d.PcieRoot, d.NumaNode = at.PCIeRoot, at.NUMANode
	if d.KernelIfName != "" {
		if err := readNetdev(d, filepath.Join(path, "net", d.KernelIfName)); err != nil {
			return nil, err
		}
		d.RdmaDevice = rdma.InPCIDevice(path)
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

// pfInfo is what the VFs of one PF share: the PF's netdev and the VF
// index of each VF (by PCI address), as its virtfnN links say.
type pfInfo struct {
	netdev string
	vfs    map[string]int
}

// pfCache holds the PFs one discovery has read, by the base name of their
// directory (their PCI address), so that each PF is read once, not once
// per VF: a PF with N VFs costs N readlinks instead of N*N (and, in
// switchdev mode, N phys_port_name reads instead of N*N).
type pfCache map[string]*pfInfo

// get returns the PF behind pf, a VF's physfn link, reading it the first
// time. A PF that is gone has no netdev and no VF indexes.
func (c pfCache) get(pf string) (*pfInfo, error) {
	key := pf // not a link (never so in sysfs): not shared
	if target, err := os.Readlink(pf); err == nil {
		key = filepath.Base(target)
	}
	if info, ok := c[key]; ok {
		return info, nil
	}
	netdev, err := pfNetdev(filepath.Join(pf, "net"))
	if err != nil {
		return nil, err
	}
	vfs, err := readVFIndexes(pf)
	if err != nil {
		return nil, err
	}
	info := &pfInfo{netdev: netdev, vfs: vfs}
	c[key] = info
	return info, nil
}

// readVFIndexes reads the virtfnN links of the PF directory pf: the VF
// index of each VF, by PCI address. A link that vanishes while it is read
// is left out.
func readVFIndexes(pf string) (map[string]int, error) {
	vfs := map[string]int{}
	entries, err := os.ReadDir(pf)
	if errors.Is(err, fs.ErrNotExist) {
		return vfs, nil // the PF went away: its VFs have no index
	}
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		s, ok := strings.CutPrefix(e.Name(), "virtfn")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			continue
		}
		target, err := os.Readlink(filepath.Join(pf, e.Name()))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		vfs[filepath.Base(target)] = n
	}
	return vfs, nil
}

// pfNetdev returns the PF's netdev from its net directory dir. In
// switchdev mode a PF's directory also lists its VF representors; the
// uplink is the one whose phys_port_name is "p<N>". Otherwise it is the
// first entry.
func pfNetdev(dir string) (string, error) {
	entries, err := dirEntries(dir)
	if err != nil || len(entries) == 0 {
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
	entries, err := dirEntries(dir)
	if err != nil || len(entries) == 0 {
		return "", err
	}
	return entries[0].Name(), nil
}

// dirEntries lists dir in lexical order; a missing dir has no entries.
func dirEntries(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
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
