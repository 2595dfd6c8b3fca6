package pcitopo

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// TestRead_SameAsDeviceattribute: Read gives the root complex and the NUMA
// node that k8s.io/dynamic-resource-allocation/deviceattribute derives (the
// values other DRA drivers publish), for every function of the fixture and
// for links and addresses it refuses: an absolute link, a link out of
// devices/, a link to another function, upper-case hex, no address.
func TestRead_SameAsDeviceattribute(t *testing.T) {
	root := buildTree(t, fixture...)
	odd := map[string]string{
		"0000:05:00.0": "/sys/devices/pci0000:00/0000:05:00.0",
		"0000:06:00.0": "../../../elsewhere/pci0000:00/0000:06:00.0",
		"0000:07:00.0": "../../../devices/pci0000:00/0000:00:01.0/0000:01:00.0",
		"0000:0B:00.0": "../../../devices/pci0000:00/0000:0B:00.0",
	}
	mkdir(t, filepath.Join(root, "devices/pci0000:00/0000:0B:00.0"))
	for addr, target := range odd {
		if err := os.Symlink(target, filepath.Join(root, busDevices, addr)); err != nil {
			t.Fatal(err)
		}
	}
	addrs := []string{"0000:09:00.0", "virtio0", "0000:0A:00.0", "", "0000:01:00.0/..", "0000:01:00.00"}
	for _, f := range fixture {
		addrs = append(addrs, filepath.Base(f.path))
	}
	for addr := range odd {
		addrs = append(addrs, addr)
	}
	sysfs := Tree(root)
	for _, addr := range addrs {
		got, _ := Read(sysfs, addr)
		var want Placement
		if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(addr, deviceattribute.WithFS(sysfs)); err == nil {
			want.PCIeRoot = *a.Value.StringValue
		}
		if a, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(addr, deviceattribute.ScalarAttribute, deviceattribute.WithFS(sysfs)); err == nil {
			want.NUMANode = new(int32(*a.Value.IntValue))
		}
		if got.PCIeRoot != want.PCIeRoot || (got.NUMANode == nil) != (want.NUMANode == nil) ||
			got.NUMANode != nil && *got.NUMANode != *want.NUMANode {
			t.Errorf("Read(%q) = %+v, deviceattribute says %+v", addr, show(got), show(want))
		}
	}
}

func show(p Placement) string {
	if p.NUMANode == nil {
		return p.PCIeRoot + " numa=none"
	}
	return fmt.Sprintf("%s numa=%d", p.PCIeRoot, *p.NUMANode)
}
