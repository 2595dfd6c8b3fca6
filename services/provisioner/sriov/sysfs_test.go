package sriov

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// node is one entry of a fake sysfs tree, by its path under the root: a
// file with content, a symlink to target (also a path under the root; it is
// written relative, as sysfs does), or a directory when both are empty.
type node struct {
	path   string
	file   string
	target string
}

// buildTree writes nodes under a new temporary root and returns the root.
func buildTree(tb testing.TB, nodes []node) string {
	tb.Helper()
	root := tb.TempDir()
	writeNodes(tb, root, nodes)
	return root
}

// writeNodes writes nodes under root, in order, making parent directories
// as needed.
func writeNodes(tb testing.TB, root string, nodes []node) {
	tb.Helper()
	for _, n := range nodes {
		p := filepath.Join(root, n.path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			tb.Fatal(err)
		}
		var err error
		switch {
		case n.target != "":
			rel, rerr := filepath.Rel(filepath.Dir(p), filepath.Join(root, n.target))
			if rerr != nil {
				tb.Fatal(rerr)
			}
			err = os.Symlink(rel, p)
		case n.file != "":
			err = os.WriteFile(p, []byte(n.file+"\n"), 0o644)
		default:
			err = os.MkdirAll(p, 0o755)
		}
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// hotplug adds the VF d (the virtfnN link of its PF too) to the tree at
// root so that a concurrent Discover sees all of it or none: its
// bus/pci/devices link comes last.
func hotplug(tb testing.TB, root string, d pciDev, index int) {
	tb.Helper()
	var busLink node
	var ns []node
	for _, n := range d.nodes() {
		if strings.HasPrefix(n.path, "bus/pci/devices/") {
			busLink = n
			continue
		}
		ns = append(ns, n)
	}
	pf := "devices/" + d.parent + "/" + d.physfn
	ns = append(ns, node{path: pf + "/virtfn" + strconv.Itoa(index), target: "devices/" + d.parent + "/" + d.addr}, busLink)
	writeNodes(tb, root, ns)
}

// unplug removes d's bus/pci/devices link, which hides it from Discover.
func unplug(tb testing.TB, root string, d pciDev) {
	tb.Helper()
	if err := os.Remove(filepath.Join(root, "bus/pci/devices", d.addr)); err != nil {
		tb.Fatal(err)
	}
}

// pciDev describes one PCI function of a fake sysfs tree.
type pciDev struct {
	addr   string // 0000:03:02.0
	parent string // its path under devices/: pci0000:00/0000:00:02.0
	class  string // 0x020000
	vendor string
	device string
	driver string // "" = unbound
	numa   string // "" = no numa_node file
	// The kernel netdev, if bound to a netdev driver.
	netdev, mac, mtu string
	// For a VF: its PF's address. For a PF: its VFs' addresses, by index,
	// and the SR-IOV counts ("" = not SR-IOV capable).
	physfn           string
	virtfns          []string
	totalVFs, numVFs string
	// The IOMMU group ("" = none) and whether vfio made it up in its
	// no-IOMMU mode.
	iommuGroup string
	noiommu    bool
}

// nodes is d as sysfs shows it: the device directory under devices/, its
// bus/pci/devices link, and its netdev under class/net.
func (d pciDev) nodes() []node {
	dir := "devices/" + d.parent + "/" + d.addr
	ns := []node{
		{path: dir + "/class", file: d.class},
		{path: dir + "/vendor", file: d.vendor},
		{path: dir + "/device", file: d.device},
		{path: "bus/pci/devices/" + d.addr, target: dir},
	}
	if d.driver != "" {
		ns = append(ns,
			node{path: "bus/pci/drivers/" + d.driver},
			node{path: dir + "/driver", target: "bus/pci/drivers/" + d.driver})
	}
	if d.numa != "" {
		ns = append(ns, node{path: dir + "/numa_node", file: d.numa})
	}
	if d.netdev != "" {
		net := dir + "/net/" + d.netdev
		ns = append(ns,
			node{path: net + "/address", file: d.mac},
			node{path: net + "/mtu", file: d.mtu},
			node{path: net + "/device", target: dir},
			node{path: "class/net/" + d.netdev, target: net})
	}
	if d.physfn != "" {
		ns = append(ns, node{path: dir + "/physfn", target: "devices/" + d.parent + "/" + d.physfn})
	}
	for i, vf := range d.virtfns {
		ns = append(ns, node{path: dir + "/virtfn" + strconv.Itoa(i), target: "devices/" + d.parent + "/" + vf})
	}
	if g := d.iommuGroup; g != "" {
		ns = append(ns, node{path: "kernel/iommu_groups/" + g + "/devices"},
			node{path: dir + "/iommu_group", target: "kernel/iommu_groups/" + g})
		if d.noiommu {
			ns = append(ns, node{path: "kernel/iommu_groups/" + g + "/name", file: "vfio-noiommu"})
		}
	}
	if d.totalVFs != "" {
		ns = append(ns,
			node{path: dir + "/sriov_totalvfs", file: d.totalVFs},
			node{path: dir + "/sriov_numvfs", file: d.numVFs})
	}
	return ns
}

// The fixture: an Intel-style PF with 2 VFs bound to iavf, a Mellanox-style
// PF with 3 VFs (one bound to mlx5_core, one to vfio-pci, one unbound), an
// Intel PF with no VFs yet, a NIC with no SR-IOV, and an NVMe VF that must be
// ignored.
var (
	intelPF = pciDev{addr: "0000:03:00.0", parent: "pci0000:00/0000:00:02.0", class: "0x020000",
		vendor: "0x8086", device: "0x1572", driver: "i40e", numa: "0",
		netdev: "ens1f0", mac: "3c:fd:fe:00:00:01", mtu: "9000",
		virtfns: []string{"0000:03:02.0", "0000:03:02.1"}, totalVFs: "64", numVFs: "2"}
	intelVF0 = pciDev{addr: "0000:03:02.0", parent: "pci0000:00/0000:00:02.0", class: "0x020000",
		vendor: "0x8086", device: "0x154c", driver: "iavf", numa: "0",
		netdev: "ens1f0v0", mac: "02:00:00:03:02:00", mtu: "1500", physfn: "0000:03:00.0"}
	intelVF1 = pciDev{addr: "0000:03:02.1", parent: "pci0000:00/0000:00:02.0", class: "0x020000",
		vendor: "0x8086", device: "0x154c", driver: "iavf", numa: "0",
		netdev: "ens1f0v1", mac: "02:00:00:03:02:01", mtu: "1500", physfn: "0000:03:00.0"}
	// intelVF2 is not in the fixture: tests hotplug it.
	intelVF2 = pciDev{addr: "0000:03:02.2", parent: "pci0000:00/0000:00:02.0", class: "0x020000",
		vendor: "0x8086", device: "0x154c", driver: "iavf", numa: "0",
		netdev: "ens1f0v2", mac: "02:00:00:03:02:02", mtu: "1500", physfn: "0000:03:00.0"}
	mlxPF = pciDev{addr: "0000:5e:00.0", parent: "pci0000:5d/0000:5d:00.0", class: "0x020000",
		vendor: "0x15b3", device: "0x1017", driver: "mlx5_core", numa: "1",
		netdev: "ens2f0np0", mac: "b8:59:9f:00:00:01", mtu: "1500",
		virtfns: []string{"0000:5e:00.2", "0000:5e:00.3", "0000:5e:00.4"}, totalVFs: "8", numVFs: "3"}
	mlxVF0 = pciDev{addr: "0000:5e:00.2", parent: "pci0000:5d/0000:5d:00.0", class: "0x020000",
		vendor: "0x15b3", device: "0x1018", driver: "mlx5_core", numa: "1",
		netdev: "ens2f0v0", mac: "02:00:00:5e:00:02", mtu: "1500", physfn: "0000:5e:00.0"}
	mlxVF1vfio = pciDev{addr: "0000:5e:00.3", parent: "pci0000:5d/0000:5d:00.0", class: "0x020000",
		vendor: "0x15b3", device: "0x1018", driver: "vfio-pci", numa: "1", physfn: "0000:5e:00.0", iommuGroup: "41"}
	mlxVF2unbound = pciDev{addr: "0000:5e:00.4", parent: "pci0000:5d/0000:5d:00.0", class: "0x020000",
		vendor: "0x15b3", device: "0x1018", numa: "-1", physfn: "0000:5e:00.0"}
	emptyPF = pciDev{addr: "0000:04:00.0", parent: "pci0000:00/0000:00:03.0", class: "0x020000",
		vendor: "0x8086", device: "0x1572", driver: "i40e", numa: "0",
		netdev: "ens3f0", mac: "3c:fd:fe:00:00:02", mtu: "1500", totalVFs: "8", numVFs: "0"}
	plainNIC = pciDev{addr: "0000:06:00.0", parent: "pci0000:00/0000:00:1c.0", class: "0x020000",
		vendor: "0x8086", device: "0x15b8", driver: "e1000e",
		netdev: "eno1", mac: "00:1b:21:00:00:01", mtu: "1500"}
	nvmePF = pciDev{addr: "0000:01:00.0", parent: "pci0000:00/0000:00:01.0", class: "0x010802",
		vendor: "0x144d", device: "0xa824", driver: "nvme", numa: "0",
		virtfns: []string{"0000:01:00.1"}, totalVFs: "4", numVFs: "1"}
	nvmeVF = pciDev{addr: "0000:01:00.1", parent: "pci0000:00/0000:00:01.0", class: "0x010802",
		vendor: "0x144d", device: "0xa824", driver: "nvme", numa: "0", physfn: "0000:01:00.0"}
)

// fixtureTree builds the fixture, plus extra nodes.
func fixtureTree(tb testing.TB, extra ...node) string {
	tb.Helper()
	var ns []node
	for _, d := range []pciDev{intelPF, intelVF0, intelVF1, mlxPF, mlxVF0, mlxVF1vfio, mlxVF2unbound, emptyPF, plainNIC, nvmePF, nvmeVF} {
		ns = append(ns, d.nodes()...)
	}
	return buildTree(tb, append(ns, extra...))
}

// testLogger logs through tb.
func testLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tb.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func readFile(tb testing.TB, path string) string {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
