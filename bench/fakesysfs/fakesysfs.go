// Package fakesysfs writes the fake sysfs tree of the inventory benchmarks:
// SR-IOV physical functions with their virtual functions bound to iavf,
// laid out as the provisioner's sr-iov manager reads them (directories,
// files and relative symlinks, as its own tests build theirs).
package fakesysfs

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// The size of the benchmarks' tree: 16 PFs x 64 VFs = 1,024 VFs.
const PFs, VFsPerPF = 16, 64

// Write writes pfs PFs with vfsPerPF VFs each under root.
func Write(root string, pfs, vfsPerPF int) error {
	w := &writer{root: root}
	for _, d := range []string{"i40e", "iavf"} {
		w.dir("bus/pci/drivers/" + d)
	}
	for p := range pfs {
		bus := 0x10 + 2*p
		parent := fmt.Sprintf("devices/pci0000:%02x/0000:%02x:00.0", bus, bus)
		pfAddr := fmt.Sprintf("0000:%02x:00.0", bus+1)
		pfDir := parent + "/" + pfAddr
		w.pci(pfDir, pfAddr, "0x1572", "i40e", fmt.Sprintf("ens%df0", p), fmt.Sprintf("3c:fd:fe:00:%02x:00", p))
		w.file(pfDir+"/sriov_totalvfs", strconv.Itoa(vfsPerPF))
		w.file(pfDir+"/sriov_numvfs", strconv.Itoa(vfsPerPF))
		for v := range vfsPerPF {
			addr := fmt.Sprintf("0000:%02x:%02x.%d", bus+1, 2+v/8, v%8)
			dir := parent + "/" + addr
			w.pci(dir, addr, "0x154c", "iavf", fmt.Sprintf("ens%df0v%d", p, v), fmt.Sprintf("02:00:00:%02x:%02x:00", p, v))
			w.link(dir+"/physfn", pfDir)
			w.link(pfDir+"/virtfn"+strconv.Itoa(v), dir)
		}
	}
	if w.err != nil {
		return fmt.Errorf("writing the fake sysfs tree: %w", w.err)
	}
	return nil
}

type writer struct {
	root string
	err  error
}

func (w *writer) dir(path string) {
	if w.err == nil {
		w.err = os.MkdirAll(filepath.Join(w.root, path), 0o755)
	}
}

func (w *writer) file(path, content string) {
	w.dir(filepath.Dir(path))
	if w.err == nil {
		w.err = os.WriteFile(filepath.Join(w.root, path), []byte(content+"\n"), 0o644)
	}
}

// link makes path a relative symlink to target (both under the root).
func (w *writer) link(path, target string) {
	w.dir(filepath.Dir(path))
	if w.err != nil {
		return
	}
	p := filepath.Join(w.root, path)
	rel, err := filepath.Rel(filepath.Dir(p), filepath.Join(w.root, target))
	if err == nil {
		err = os.Symlink(rel, p)
	}
	w.err = err
}

// pci writes an Intel Ethernet function with a netdev, bound to driver.
func (w *writer) pci(dir, addr, device, driver, netdev, mac string) {
	w.file(dir+"/class", "0x020000")
	w.file(dir+"/vendor", "0x8086")
	w.file(dir+"/device", device)
	w.file(dir+"/numa_node", "0")
	w.link(dir+"/driver", "bus/pci/drivers/"+driver)
	w.file(dir+"/net/"+netdev+"/address", mac)
	w.file(dir+"/net/"+netdev+"/mtu", "1500")
	w.link("class/net/"+netdev, dir+"/net/"+netdev)
	w.link("bus/pci/devices/"+addr, dir)
}
