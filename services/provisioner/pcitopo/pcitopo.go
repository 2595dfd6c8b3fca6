// Package pcitopo tells where a PCI function sits in the host: the PCIe
// root complex it hangs off and its NUMA node, read from a sysfs tree, for
// the standard attributes resource.kubernetes.io/pcieRoot and numaNode. The
// values are the ones k8s.io/dynamic-resource-allocation/deviceattribute
// derives (every DRA driver that uses it, a GPU driver's say), so that a
// claim can align a NIC with a GPU by matchAttribute; a test holds Read to
// deviceattribute's results. The provisioner does not link deviceattribute
// itself: it brings k8s.io/api and apimachinery along, whose code and data
// would be most of the idle provisioner's memory.
package pcitopo

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	if !isPCIAddress(addr) {
		return p, nil
	}
	p.PCIeRoot = pcieRoot(sysfs, addr)
	b, err := fs.ReadFile(sysfs, busDevices+"/"+addr+"/numa_node")
	if errors.Is(err, fs.ErrNotExist) {
		return p, nil // no numa_node file: unknown
	}
	if err != nil {
		return p, fmt.Errorf("numa_node of %s: %w", addr, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return p, fmt.Errorf("numa_node of %s: %w", addr, err)
	}
	if n >= 0 && n <= math.MaxInt32 { // -1: no NUMA affinity
		p.NUMANode = new(int32(n))
	}
	return p, nil
}

// pcieRoot is the root complex of addr: the first element under devices/
// of its bus/pci/devices link's target, which must be a devices/pci...
// path ending in addr; "" otherwise.
func pcieRoot(sysfs fs.ReadLinkFS, addr string) string {
	link := busDevices + "/" + addr
	target, err := fs.ReadLink(sysfs, link)
	if err != nil {
		return ""
	}
	if !filepath.IsAbs(target) {
		target = filepath.Clean(filepath.Join(filepath.Dir(link), target))
	}
	rest, ok := strings.CutPrefix(target, "devices/")
	if !ok || !strings.HasPrefix(rest, "pci") || filepath.Base(target) != addr {
		return ""
	}
	root, _, _ := strings.Cut(rest, "/")
	return root
}

// isPCIAddress says whether addr is a PCI address in sysfs's form,
// dddd:bb:dd.f in lower-case hex.
func isPCIAddress(addr string) bool {
	if len(addr) != len("0000:00:00.0") {
		return false
	}
	for i, c := range addr {
		switch i {
		case 4, 7:
			if c != ':' {
				return false
			}
		case 10:
			if c != '.' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
	}
	return true
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
