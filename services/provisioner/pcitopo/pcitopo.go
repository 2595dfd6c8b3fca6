// Package pcitopo tells where a PCI function sits in the host: the PCIe
// root complex it hangs off and its NUMA node. It reads them from a sysfs
// tree through k8s.io/dynamic-resource-allocation/deviceattribute, so that
// netdra's values are the ones every DRA driver that uses it derives for the
// standard attributes resource.kubernetes.io/pcieRoot and numaNode (a GPU
// driver's, say), and a claim can align a NIC with a GPU by matchAttribute.
package pcitopo

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/dynamic-resource-allocation/deviceattribute"
)

// Placement is where a PCI function sits.
type Placement struct {
	// PCIeRoot is the root complex, pci<domain>:<bus> (pci0000:00); "" when
	// it cannot be determined.
	PCIeRoot string
	// NUMANode is the function's NUMA node; nil when unknown or when the
	// function has no NUMA affinity (numa_node -1).
	NUMANode *int32
}

// Read returns the placement of the PCI function addr (0000:03:00.1) in the
// sysfs tree sysfs: the root complex from its bus/pci/devices/<addr> link,
// the NUMA node from the numa_node file there. What cannot be determined is
// left empty. The error is set only when the numa_node file is there but
// cannot be read or is not a number; the placement has no NUMA node then,
// and its root complex still.
func Read(sysfs fs.ReadLinkFS, addr string) (Placement, error) {
	var p Placement
	if a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(addr, deviceattribute.WithFS(sysfs)); err == nil && a.Value.StringValue != nil {
		p.PCIeRoot = *a.Value.StringValue
	}
	a, err := deviceattribute.GetNUMANodeAttributeByPCIBusID(addr, deviceattribute.ScalarAttribute, deviceattribute.WithFS(sysfs))
	var pathErr *fs.PathError
	var numErr *strconv.NumError
	switch {
	case err == nil:
		if n := a.Value.IntValue; n != nil && *n <= math.MaxInt32 {
			p.NUMANode = new(int32(*n))
		}
	case errors.Is(err, fs.ErrNotExist):
		// no numa_node file: unknown
	case errors.As(err, &pathErr), errors.As(err, &numErr):
		return p, err
	default:
		// deviceattribute's verdict on what it read: no NUMA affinity
		// (numa_node -1), or addr is not a PCI address.
	}
	return p, nil
}

// Tree is the sysfs tree at root, as Read reads it.
func Tree(root string) fs.ReadLinkFS {
	return os.DirFS(root).(fs.ReadLinkFS)
}

// busDevices is where sysfs lists the PCI functions, one link each into
// devices/.
const busDevices = "bus/pci/devices"

// TreeListing is the sysfs tree at root with its bus/pci/devices taken from
// pciDir (a copy of the list kept elsewhere), or Tree(root) when pciDir is
// empty. A link in pciDir that is absolute and points into root reads as
// sysfs writes it, relative to bus/pci/devices.
func TreeListing(root, pciDir string) fs.ReadLinkFS {
	if pciDir == "" {
		return Tree(root)
	}
	real, err := filepath.EvalSymlinks(root)
	if err != nil {
		real = root
	}
	return listingFS{root: Tree(root), pci: Tree(pciDir), realRoot: real}
}

// listingFS is a sysfs tree whose bus/pci/devices is another directory.
type listingFS struct {
	root, pci fs.ReadLinkFS
	realRoot  string // the root with its symlinks resolved
}

var _ fs.ReadLinkFS = listingFS{}

// resolve returns the tree that holds name, name in it, and whether that
// is the PCI list.
func (f listingFS) resolve(name string) (fs.ReadLinkFS, string, bool) {
	if name == busDevices {
		return f.pci, ".", true
	}
	if rest, ok := strings.CutPrefix(name, busDevices+"/"); ok {
		return f.pci, rest, true
	}
	return f.root, name, false
}

func (f listingFS) Open(name string) (fs.File, error) {
	fsys, name, _ := f.resolve(name)
	return fsys.Open(name)
}

func (f listingFS) Lstat(name string) (fs.FileInfo, error) {
	fsys, name, _ := f.resolve(name)
	return fsys.Lstat(name)
}

func (f listingFS) ReadLink(name string) (string, error) {
	fsys, name, listed := f.resolve(name)
	target, err := fsys.ReadLink(name)
	if err != nil || !listed || !filepath.IsAbs(target) {
		return target, err
	}
	rel, err := filepath.Rel(f.realRoot, target)
	if err != nil || !filepath.IsLocal(rel) {
		return target, nil
	}
	return filepath.Join("..", "..", "..", rel), nil
}
