package pcitopo

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// fn is a PCI function of a fake sysfs tree: its directory under devices/
// (the root complex first, then the bridges above it, then its address)
// and its numa_node file ("" for none).
type fn struct {
	path string // pci0000:00/0000:00:01.0/0000:01:00.0
	numa string
}

// buildTree writes fns under a new root as sysfs lays them out: a directory
// under devices/ and a relative bus/pci/devices/<addr> link to it.
func buildTree(t *testing.T, fns ...fn) string {
	t.Helper()
	root := t.TempDir()
	for _, f := range fns {
		dir := filepath.Join(root, "devices", f.path)
		mkdir(t, dir)
		if f.numa != "" {
			if err := os.WriteFile(filepath.Join(dir, "numa_node"), []byte(f.numa+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		mkdir(t, filepath.Join(root, busDevices))
		if err := os.Symlink(filepath.Join("../../../devices", f.path), filepath.Join(root, busDevices, filepath.Base(f.path))); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

var fixture = []fn{
	{path: "pci0000:00/0000:00:01.0/0000:01:00.0", numa: "1"},
	{path: "pci0000:00/0000:00:01.0/0000:01:00.1", numa: "-1"},
	{path: "pci0000:00/0000:00:02.0/0000:02:00.0"},
	{path: "pci0001:80/0001:80:00.0/0001:81:00.0", numa: "0"},
	{path: "pci0000:00/0000:00:03.0/0000:03:00.0", numa: "zero"},
}

func TestRead(t *testing.T) {
	root := buildTree(t, fixture...)
	for _, tc := range []struct {
		name    string
		addr    string
		want    Placement
		wantErr bool
	}{
		{name: "under a bridge, NUMA node 1", addr: "0000:01:00.0", want: Placement{PCIeRoot: "pci0000:00", NUMANode: new(int32(1))}},
		{name: "no NUMA affinity", addr: "0000:01:00.1", want: Placement{PCIeRoot: "pci0000:00"}},
		{name: "no numa_node file", addr: "0000:02:00.0", want: Placement{PCIeRoot: "pci0000:00"}},
		{name: "another domain", addr: "0001:81:00.0", want: Placement{PCIeRoot: "pci0001:80", NUMANode: new(int32(0))}},
		{name: "not listed", addr: "0000:09:00.0"},
		{name: "not a PCI address", addr: "virtio0"},
		{name: "numa_node not a number", addr: "0000:03:00.0", want: Placement{PCIeRoot: "pci0000:00"}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Read(Tree(root), tc.addr)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Read(%s) error = %v, want an error: %t", tc.addr, err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Read(%s) (-want +got):\n%s", tc.addr, diff)
			}
		})
	}
}

// TestTreeListing: with the PCI list taken from elsewhere, a function reads
// the same whether the list is another sysfs tree's (relative links) or
// holds absolute links into the root.
func TestTreeListing(t *testing.T) {
	fns := []fn{fixture[0], fixture[3]}
	want := map[string]Placement{
		"0000:01:00.0": {PCIeRoot: "pci0000:00", NUMANode: new(int32(1))},
		"0001:81:00.0": {PCIeRoot: "pci0001:80", NUMANode: new(int32(0))},
	}
	for _, tc := range []struct {
		name string
		tree func(t *testing.T) (root, pciDir string)
	}{
		{name: "another sysfs tree's list", tree: func(t *testing.T) (string, string) {
			return t.TempDir(), filepath.Join(buildTree(t, fns...), busDevices)
		}},
		{name: "absolute links into the root", tree: func(t *testing.T) (string, string) {
			root := buildTree(t, fns...)
			real, err := filepath.EvalSymlinks(root)
			if err != nil {
				t.Fatal(err)
			}
			pciDir := t.TempDir()
			for _, f := range fns {
				if err := os.Symlink(filepath.Join(real, "devices", f.path), filepath.Join(pciDir, filepath.Base(f.path))); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.RemoveAll(filepath.Join(root, busDevices)); err != nil {
				t.Fatal(err)
			}
			return root, pciDir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, pciDir := tc.tree(t)
			got := map[string]Placement{}
			for addr := range want {
				p, err := Read(TreeListing(root, pciDir), addr)
				if err != nil {
					t.Fatalf("Read(%s): %v", addr, err)
				}
				got[addr] = p
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("placements (-want +got):\n%s", diff)
			}
			if p, err := Read(Tree(root), "0000:01:00.0"); err != nil || p != (Placement{}) {
				t.Errorf("Read in the root's own list = %+v, %v; want nothing", p, err)
			}
		})
	}
}
