package hostdev

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/netdra/netdra/services/provisioner/pcitopo"
	"github.com/netdra/netdra/services/provisioner/rdma"
)

// pciAddr is a PCI function address as sysfs names it (0000:03:00.1).
var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// hwInfo is what sysfs tells about the device behind an interface.
type hwInfo struct {
	driver   string // basename of device/driver
	vendor   string // device/vendor, lower case (0x8086)
	device   string // device/device, lower case
	pci      string // basename of device, when a PCI address
	pcieRoot string // the root complex (pciDDDD:BB), for a PCI device
	numa     *int32 // the NUMA node of a PCI device, when not -1
	rdma     string // the RDMA device (rdma.ForNetdev), for a physical or virtual link
}

// readHW reads <root>/class/net/<ifName>/device. sysfs lists the
// interfaces of the network namespace it was mounted from, which need not be
// the one netlink talks to, so the entry is used only when its ifindex is
// ifIndex; otherwise the result is empty, and so is all but the RDMA device
// (soft-RoCE's) for an interface with no device (a virtual link). Unreadable attributes are left empty: discovery
// never fails on sysfs.
func readHW(root, ifName string, ifIndex int) hwInfo {
	var hw hwInfo
	dir := filepath.Join(root, "class", "net", ifName)
	if idx, ok := readAttr(filepath.Join(dir, "ifindex")); !ok || idx != strconv.Itoa(ifIndex) {
		return hw
	}
	hw.rdma = rdma.ForNetdev(root, ifName)
	dev := filepath.Join(dir, "device")
	target, err := os.Readlink(dev)
	if err != nil {
		return hw
	}
	if drv, err := os.Readlink(filepath.Join(dev, "driver")); err == nil {
		hw.driver = filepath.Base(drv)
	}
	hw.vendor, _ = readAttr(filepath.Join(dev, "vendor"))
	hw.device, _ = readAttr(filepath.Join(dev, "device"))
	hw.vendor, hw.device = strings.ToLower(hw.vendor), strings.ToLower(hw.device)
	if base := filepath.Base(target); pciAddr.MatchString(base) {
		hw.pci = base
		at, _ := pcitopo.Read(pcitopo.Tree(root), base) // an unreadable numa_node: unknown
		hw.pcieRoot, hw.numa = at.PCIeRoot, at.NUMANode
	}
	return hw
}

// readAttr reads a one-line sysfs attribute, trimmed.
func readAttr(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}
