package sriov

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
)

const sriov = devicev1.DeviceManager_DEVICE_MANAGER_SRIOV

// fixtureVFs is what Discover finds in the fixture.
func fixtureVFs() []*devicev1.Device {
	return []*devicev1.Device{
		{Name: "0000-03-02-0", Manager: sriov, KernelIfName: "ens1f0v0", PciAddress: "0000:03:02.0",
			PfName: "ens1f0", VfIndex: new(int32(0)), VendorId: "0x8086", DeviceId: "0x154c", Driver: "iavf",
			NumaNode: new(int32(0)), PcieRoot: "pci0000:00", MacAddress: "02:00:00:03:02:00", Mtu: 1500},
		{Name: "0000-03-02-1", Manager: sriov, KernelIfName: "ens1f0v1", PciAddress: "0000:03:02.1",
			PfName: "ens1f0", VfIndex: new(int32(1)), VendorId: "0x8086", DeviceId: "0x154c", Driver: "iavf",
			NumaNode: new(int32(0)), PcieRoot: "pci0000:00", MacAddress: "02:00:00:03:02:01", Mtu: 1500},
		{Name: "0000-5e-00-2", Manager: sriov, KernelIfName: "ens2f0v0", PciAddress: "0000:5e:00.2",
			PfName: "ens2f0np0", VfIndex: new(int32(0)), VendorId: "0x15b3", DeviceId: "0x1018", Driver: "mlx5_core",
			NumaNode: new(int32(1)), PcieRoot: "pci0000:5d", MacAddress: "02:00:00:5e:00:02", Mtu: 1500},
		{Name: "0000-5e-00-3", Manager: sriov, PciAddress: "0000:5e:00.3",
			PfName: "ens2f0np0", VfIndex: new(int32(1)), VendorId: "0x15b3", DeviceId: "0x1018", Driver: "vfio-pci",
			NumaNode: new(int32(1)), PcieRoot: "pci0000:5d"},
		{Name: "0000-5e-00-4", Manager: sriov, PciAddress: "0000:5e:00.4",
			PfName: "ens2f0np0", VfIndex: new(int32(2)), VendorId: "0x15b3", DeviceId: "0x1018",
			PcieRoot: "pci0000:5d"},
	}
}

func TestDiscover(t *testing.T) {
	for _, tc := range []struct {
		name string
		tree func(t *testing.T) string
		want []*devicev1.Device
	}{
		{name: "fixture", tree: func(t *testing.T) string { return fixtureTree(t) }, want: fixtureVFs()},
		{name: "no PCI devices", tree: func(t *testing.T) string {
			return buildTree(t, []node{{path: "bus/pci/devices"}})
		}},
		{name: "only PFs and other classes", tree: func(t *testing.T) string {
			var ns []node
			for _, d := range []pciDev{emptyPF, plainNIC, nvmePF, nvmeVF} {
				ns = append(ns, d.nodes()...)
			}
			return buildTree(t, ns)
		}},
		{name: "a VF whose files vanished is left out", tree: func(t *testing.T) string {
			root := fixtureTree(t)
			rm(t, root, "devices/pci0000:00/0000:00:02.0/0000:03:02.1/class")
			return root
		}, want: without(fixtureVFs(), "0000-03-02-1")},
		{name: "a VF whose PF has no virtfn link for it has no index", tree: func(t *testing.T) string {
			root := fixtureTree(t)
			rm(t, root, "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0/virtfn2")
			return root
		}, want: func() []*devicev1.Device {
			w := fixtureVFs()
			w[4].VfIndex = nil
			return w
		}()},
		{name: "switchdev: the PF's uplink, not a representor listed before it", tree: func(t *testing.T) string {
			pf := "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.0/net/"
			return fixtureTree(t,
				node{path: pf + "ens2f0np0/phys_port_name", file: "p0"},
				node{path: pf + "ens2f0_0/phys_port_name", file: "pf0vf0"},
				node{path: pf + "ens2f0_1/phys_port_name", file: "pf0vf1"})
		}, want: fixtureVFs()},
		{name: "link state from the netdev's flags and operstate", tree: func(t *testing.T) string {
			vf0 := "devices/pci0000:00/0000:00:02.0/0000:03:02.0/net/ens1f0v0/"
			vf1 := "devices/pci0000:00/0000:00:02.0/0000:03:02.1/net/ens1f0v1/"
			mlx := "devices/pci0000:5d/0000:5d:00.0/0000:5e:00.2/net/ens2f0v0/"
			return fixtureTree(t,
				node{path: vf0 + "flags", file: "0x1003"}, node{path: vf0 + "operstate", file: "up"},
				node{path: vf1 + "flags", file: "0x1003"}, node{path: vf1 + "operstate", file: "lowerlayerdown"},
				node{path: mlx + "flags", file: "0x1002"}, node{path: mlx + "operstate", file: "down"})
		}, want: func() []*devicev1.Device {
			w := fixtureVFs()
			w[0].LinkState = devicev1.LinkState_LINK_STATE_UP
			w[1].LinkState = devicev1.LinkState_LINK_STATE_DOWN
			w[2].LinkState = devicev1.LinkState_LINK_STATE_ADMIN_DOWN
			return w
		}()},
		{name: "a netdev without address and mtu files", tree: func(t *testing.T) string {
			root := fixtureTree(t)
			rm(t, root, "devices/pci0000:00/0000:00:02.0/0000:03:02.0/net/ens1f0v0/address")
			rm(t, root, "devices/pci0000:00/0000:00:02.0/0000:03:02.0/net/ens1f0v0/mtu")
			return root
		}, want: func() []*devicev1.Device {
			w := fixtureVFs()
			w[0].MacAddress, w[0].Mtu = "", 0
			return w
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Discover(tc.tree(t))
			if err != nil {
				t.Fatalf("Discover: %v", err)
			}
			if diff := cmp.Diff(tc.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("Discover (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscover_Errors(t *testing.T) {
	for _, tc := range []struct {
		name string
		tree func(t *testing.T) string
	}{
		{name: "no sysfs", tree: func(t *testing.T) string { return filepath.Join(t.TempDir(), "nope") }},
		{name: "bad class", tree: func(t *testing.T) string {
			root := fixtureTree(t)
			write(t, root, "devices/pci0000:00/0000:00:02.0/0000:03:02.0/class", "ethernet")
			return root
		}},
		{name: "bad numa_node", tree: func(t *testing.T) string {
			root := fixtureTree(t)
			write(t, root, "devices/pci0000:00/0000:00:02.0/0000:03:02.0/numa_node", "zero")
			return root
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, err := Discover(tc.tree(t)); err == nil {
				t.Fatalf("Discover = %v, want an error", got)
			}
		})
	}
}

func without(devs []*devicev1.Device, name string) []*devicev1.Device {
	var out []*devicev1.Device
	for _, d := range devs {
		if d.GetName() != name {
			out = append(out, d)
		}
	}
	return out
}

func rm(tb testing.TB, root, path string) {
	tb.Helper()
	if err := os.Remove(filepath.Join(root, path)); err != nil {
		tb.Fatal(err)
	}
}

func write(tb testing.TB, root, path, content string) {
	tb.Helper()
	if err := os.WriteFile(filepath.Join(root, path), []byte(content+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// sysBusPciDevPath: the PCI devices listed elsewhere than
// <sysfsRoot>/bus/pci/devices are found there, and only there.
func TestDiscoverPCI_ElsewhereListed(t *testing.T) {
	root := fixtureTree(t)
	list := filepath.Join(root, "bus", "pci", "devices")
	alt := filepath.Join(t.TempDir(), "pci-devices")
	if err := os.MkdirAll(alt, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(list)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		target, err := filepath.EvalSymlinks(filepath.Join(list, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(alt, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(list); err != nil {
		t.Fatal(err)
	}
	got, err := DiscoverPCI(root, alt)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(fixtureVFs(), got, protocmp.Transform()); diff != "" {
		t.Errorf("VFs (-want +got):\n%s", diff)
	}
	if _, err := Discover(root); err == nil {
		t.Error("Discover found the PCI list it should not look at")
	}
	if err := ValidateConfig(&provisionerv1.SriovConfig{SysBusPciDevPath: "host/sys/bus"}); err == nil || !strings.Contains(err.Error(), "sysBusPciDevPath") {
		t.Errorf("a relative sysBusPciDevPath: %v", err)
	}
}
