// Package rdma finds the RDMA device of a network interface and the
// character devices a container needs to use it, in sysfs only: it reads
// <sysfs>/class/net, <sysfs>/class/infiniband, infiniband_verbs,
// infiniband_mad and misc under a configurable root (a fake tree in tests)
// and names the device nodes under a configurable device root (/dev on the
// host), which it never opens. The device managers use it at discovery
// (which RDMA device a VF or a host NIC has) and at Setup (its device
// nodes, which dra gives the pod's containers through CDI). Moving an RDMA
// device between network namespaces is package link's.
//
// Where an interface's RDMA device is:
//
//   - a PCI function's: <sysfs>/class/net/<if>/device/infiniband/<dev>
//     (mlx5 VFs and PFs, irdma, ...), or <pci dir>/infiniband/<dev>;
//   - a software device's (soft-RoCE, rdma_rxe): the one whose
//     <sysfs>/class/infiniband/<dev>/parent names the interface.
//
// Its character devices, each under <devRoot>/infiniband on the host and
// /dev/infiniband in the container: uverbsN (infiniband_verbs/uverbsN/ibdev
// names the device; the verbs themselves), umadN and issmN
// (infiniband_mad, when ib_umad is loaded), and rdma_cm (misc/rdma_cm, when
// rdma_ucm is loaded; one for every device).
package rdma

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// ErrNoDevice means the RDMA device is not in sysfs (any more).
var ErrNoDevice = errors.New("no such RDMA device")

// maxNameLen is the longest RDMA device name (IB_DEVICE_NAME_MAX less the
// NUL).
const maxNameLen = 63

// ValidateName checks an RDMA device name as the kernel gives them: 1 to
// 63 bytes of printable ASCII, no '/' or blank, not "." or "..". It
// returns a *fielderr.Error for field.
func ValidateName(field, name string) error {
	switch {
	case name == "":
		return fielderr.New(field, "required")
	case len(name) > maxNameLen:
		return fielderr.New(field, "%d bytes; an RDMA device name has at most %d", len(name), maxNameLen)
	case name == "." || name == "..":
		return fielderr.New(field, "%q is not an RDMA device name", name)
	}
	for _, c := range []byte(name) {
		if c <= ' ' || c > '~' || c == '/' {
			return fielderr.New(field, "%q is not an RDMA device name (printable ASCII, no '/' or blank)", name)
		}
	}
	return nil
}

// InPCIDevice returns the RDMA device of the PCI function whose sysfs
// directory is dir (its infiniband/ entry, the first by name when there
// are several), or "" when it has none or it cannot be read: discovery
// never fails on sysfs.
func InPCIDevice(dir string) string {
	entries, err := os.ReadDir(filepath.Join(dir, "infiniband"))
	if err != nil {
		return ""
	}
	for _, e := range entries { // ReadDir sorts by name
		if ValidateName("", e.Name()) == nil {
			return e.Name()
		}
	}
	return ""
}

// ForNetdev returns the RDMA device of the interface ifName as the sysfs at
// root shows it: its PCI function's (InPCIDevice of class/net/<if>/device),
// else the software device whose parent is ifName; "" when it has none.
// Like InPCIDevice, it never fails.
func ForNetdev(root, ifName string) string {
	if ifName == "" || strings.ContainsRune(ifName, '/') {
		return ""
	}
	if dev := InPCIDevice(filepath.Join(root, "class", "net", ifName, "device")); dev != "" {
		return dev
	}
	class := filepath.Join(root, "class", "infiniband")
	entries, err := os.ReadDir(class)
	if err != nil {
		return ""
	}
	for _, e := range entries {
		if ValidateName("", e.Name()) != nil {
			continue
		}
		if parent, err := readAttr(filepath.Join(class, e.Name(), "parent")); err == nil && parent == ifName {
			return e.Name()
		}
	}
	return ""
}

// DeviceNodes returns the character devices a container needs to use the
// RDMA device dev, as the sysfs at root lists them, with their host paths
// under devRoot: uverbsN, umadN and issmN (those whose ibdev is dev) and
// rdma_cm, as present, sorted by path. A dev that is not in
// class/infiniband is ErrNoDevice; a sysfs directory that cannot be read
// (other than missing: the module is not loaded) is an error.
func DeviceNodes(root, devRoot, dev string) ([]*devicev1.DeviceNode, error) {
	if err := ValidateName("rdmaDevice", dev); err != nil {
		return nil, err
	}
	if _, err := os.Stat(filepath.Join(root, "class", "infiniband", dev)); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", dev, ErrNoDevice)
		}
		return nil, fmt.Errorf("RDMA device %s: %w", dev, err)
	}
	var names []string
	for _, class := range []string{"infiniband_verbs", "infiniband_mad"} {
		n, err := classDevices(filepath.Join(root, "class", class), dev)
		if err != nil {
			return nil, fmt.Errorf("RDMA device %s: %w", dev, err)
		}
		names = append(names, n...)
	}
	switch _, err := os.Stat(filepath.Join(root, "class", "misc", "rdma_cm")); {
	case err == nil:
		names = append(names, "rdma_cm")
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("RDMA device %s: rdma_cm: %w", dev, err)
	}
	slices.Sort(names)
	nodes := make([]*devicev1.DeviceNode, 0, len(names))
	for _, n := range names {
		nodes = append(nodes, &devicev1.DeviceNode{
			HostPath: filepath.Join(devRoot, "infiniband", n),
			Path:     "/dev/infiniband/" + n,
		})
	}
	return nodes, nil
}

// classDevices returns the entries of the device class directory dir
// (uverbs0, umad0, issm0, ...) whose ibdev attribute is dev. A missing
// dir (its module not loaded) has none; an entry that vanishes while it is
// read is left out; files (abi_version) are not devices.
func classDevices(dir, dev string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "uverbs") && !strings.HasPrefix(name, "umad") && !strings.HasPrefix(name, "issm") {
			continue
		}
		ibdev, err := readAttr(filepath.Join(dir, name, "ibdev"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		case ibdev == dev:
			out = append(out, name)
		}
	}
	return out, nil
}

// readAttr reads a one-line sysfs attribute, trimmed. A path that is not
// there, or not a file (ENOTDIR, EISDIR), is fs.ErrNotExist.
func readAttr(path string) (string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.EISDIR) {
		return "", fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
