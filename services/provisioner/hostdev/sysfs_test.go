package hostdev

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fakeNIC is an interface in a fake sysfs tree, laid out as the kernel does
// it: class/net/<if> links into devices/, a PCI device has its attributes,
// a bus/pci/devices link to it, a driver link into bus/pci/drivers and a
// net/<if> directory whose device link points back at it.
type fakeNIC struct {
	ifName  string
	ifIndex int
	pci     string // "" for a virtual interface (devices/virtual/net)
	parent  string // the PCI device's parent under devices/; "" is pci0000:00
	vendor  string
	device  string
	driver  string
	numa    string // "" for no numa_node file
}

func addFakeNIC(t testing.TB, root string, n fakeNIC) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	write := func(path, v string) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(path), 0o755))
		must(os.WriteFile(path, []byte(v+"\n"), 0o644))
	}
	var netDir string // relative to root
	if n.pci == "" {
		netDir = filepath.Join("devices/virtual/net", n.ifName)
	} else {
		parent := n.parent
		if parent == "" {
			parent = "pci0000:00"
		}
		devPath := filepath.Join("devices", parent, n.pci)
		devDir := filepath.Join(root, devPath)
		netDir = filepath.Join(devPath, "net", n.ifName)
		must(os.MkdirAll(filepath.Join(root, "bus/pci/devices"), 0o755))
		must(os.Symlink(filepath.Join("../../..", devPath), filepath.Join(root, "bus/pci/devices", n.pci)))
		if n.vendor != "" {
			write(filepath.Join(devDir, "vendor"), n.vendor)
		}
		if n.device != "" {
			write(filepath.Join(devDir, "device"), n.device)
		}
		if n.numa != "" {
			write(filepath.Join(devDir, "numa_node"), n.numa)
		}
		if n.driver != "" {
			must(os.MkdirAll(filepath.Join(root, "bus/pci/drivers", n.driver), 0o755))
			must(os.Symlink(filepath.Join("../../../bus/pci/drivers", n.driver), filepath.Join(devDir, "driver")))
		}
		must(os.MkdirAll(filepath.Join(root, netDir), 0o755))
		must(os.Symlink(filepath.Join("../../../", n.pci), filepath.Join(root, netDir, "device")))
	}
	write(filepath.Join(root, netDir, "ifindex"), strconv.Itoa(n.ifIndex))
	must(os.MkdirAll(filepath.Join(root, "class/net"), 0o755))
	must(os.Symlink(filepath.Join("../..", netDir), filepath.Join(root, "class/net", n.ifName)))
}

func TestReadHW(t *testing.T) {
	root := t.TempDir()
	addFakeNIC(t, root, fakeNIC{ifName: "eth0", ifIndex: 2, pci: "0000:03:00.0", vendor: "0x8086", device: "0x10D3", driver: "e1000e", numa: "1"})
	addFakeNIC(t, root, fakeNIC{ifName: "eth1", ifIndex: 3, pci: "0000:03:00.1", vendor: "0x8086", device: "0x10d3", numa: "-1"})
	addFakeNIC(t, root, fakeNIC{ifName: "veth0", ifIndex: 4})
	addFakeNIC(t, root, fakeNIC{ifName: "ens5", ifIndex: 5, pci: "0000:01:00.0", parent: "pci0000:00/0000:00:01.0", vendor: "0x15b3", device: "0x1017", driver: "mlx5_core", numa: "0"})
	addFakeNIC(t, root, fakeNIC{ifName: "ens6", ifIndex: 6, pci: "0001:81:00.0", parent: "pci0001:80/0001:80:01.0", vendor: "0x15b3", device: "0x1017", numa: "junk"})
	numa1 := int32(1)
	for _, tc := range []struct {
		name    string
		ifName  string
		ifIndex int
		want    hwInfo
	}{
		{"PCI NIC", "eth0", 2, hwInfo{driver: "e1000e", vendor: "0x8086", device: "0x10d3", pci: "0000:03:00.0", pcieRoot: "pci0000:00", numa: &numa1}},
		{"no driver, no NUMA", "eth1", 3, hwInfo{vendor: "0x8086", device: "0x10d3", pci: "0000:03:00.1", pcieRoot: "pci0000:00"}},
		{"behind a bridge", "ens5", 5, hwInfo{driver: "mlx5_core", vendor: "0x15b3", device: "0x1017", pci: "0000:01:00.0", pcieRoot: "pci0000:00", numa: new(int32(0))}},
		{"another root complex, unreadable NUMA node", "ens6", 6, hwInfo{vendor: "0x15b3", device: "0x1017", pci: "0001:81:00.0", pcieRoot: "pci0001:80"}},
		{"virtual", "veth0", 4, hwInfo{}},
		{"another namespace's eth0", "eth0", 7, hwInfo{}},
		{"not in sysfs", "eth9", 9, hwInfo{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := readHW(root, tc.ifName, tc.ifIndex)
			if diff := cmp.Diff(tc.want, got, cmp.AllowUnexported(hwInfo{})); diff != "" {
				t.Errorf("readHW(%s, %d) (-want +got):\n%s", tc.ifName, tc.ifIndex, diff)
			}
		})
	}
}

// TestReadHW_RDMA: a PCI NIC's RDMA device is its PCI function's
// infiniband/ entry, a virtual link's the soft-RoCE device whose parent it
// is; another namespace's interface of the same name has none.
func TestReadHW_RDMA(t *testing.T) {
	root := t.TempDir()
	addFakeNIC(t, root, fakeNIC{ifName: "ens5", ifIndex: 5, pci: "0000:01:00.0", vendor: "0x15b3", device: "0x1017", driver: "mlx5_core"})
	addFakeNIC(t, root, fakeNIC{ifName: "veth0", ifIndex: 4})
	addFakeNIC(t, root, fakeNIC{ifName: "veth1", ifIndex: 8})
	for path, v := range map[string]string{
		"devices/pci0000:00/0000:01:00.0/infiniband/mlx5_0/node_type": "1: CA",
		"devices/virtual/infiniband/rxe0/parent":                      "veth0",
	} {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(path)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, path), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(root, "class/infiniband"), 0o755); err != nil {
		t.Fatal(err)
	}
	for dev, target := range map[string]string{"mlx5_0": "../../devices/pci0000:00/0000:01:00.0/infiniband/mlx5_0", "rxe0": "../../devices/virtual/infiniband/rxe0"} {
		if err := os.Symlink(target, filepath.Join(root, "class/infiniband", dev)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		ifName  string
		ifIndex int
		want    string
	}{{"ens5", 5, "mlx5_0"}, {"veth0", 4, "rxe0"}, {"veth1", 8, ""}, {"veth0", 9, ""}} {
		if got := readHW(root, tc.ifName, tc.ifIndex).rdma; got != tc.want {
			t.Errorf("readHW(%s, %d).rdma = %q, want %q", tc.ifName, tc.ifIndex, got, tc.want)
		}
	}
}
