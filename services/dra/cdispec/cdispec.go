// Package cdispec writes netdra's CDI specs (Container Device Interface,
// tags.cncf.io/container-device-interface): what the containers of a pod
// get for a prepared device beyond its netdev — the character devices of a
// vfio-bound VF or of an RDMA device (/dev/infiniband), and environment variables
// naming each request's PCI addresses, as DPDK applications and users of
// the SR-IOV device plugin read them.
//
// One spec file per prepared claim, netdra.io-net_<claim UID>.json, in the
// CDI spec directory the container runtime reads (/var/run/cdi): written
// atomically (a hidden temporary file, mode 0644, renamed; not fsynced:
// writeAtomic), so the runtime never reads half a spec; removed at
// unprepare; written again when a prepared claim is prepared again or
// recovered; and [Dir.Sweep] removes every netdra spec whose claim is not
// prepared, so that a crash between writing a spec and the claim's status
// leaves none behind after the restart. Only files of netdra's kind
// (netdra.io/net) are touched: the directory is shared with the runtime's
// other vendors and with the kubelet plugin helper's device metadata specs.
//
// The kind is fixed, whatever the DRA driver name: a CDI device ID is
// netdra.io/net=<claim UID>-<device>.
package cdispec

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"tags.cncf.io/container-device-interface/pkg/parser"
	cdi "tags.cncf.io/container-device-interface/specs-go"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/hookargs"
)

// The CDI kind of netdra's devices.
const (
	Vendor = "netdra.io"
	Class  = "net"
	Kind   = Vendor + "/" + Class
)

// DefaultDir is the CDI spec directory for specs that live as long as the
// node's boot (the runtime reads /etc/cdi and /var/run/cdi by default).
const DefaultDir = "/var/run/cdi"

// EnvPrefix starts the name of the environment variable that lists a
// request's PCI addresses, as the SR-IOV device plugin names its
// PCIDEVICE_<RESOURCE> variable: PCIDEVICE_NETDRA_IO_<REQUEST>.
const EnvPrefix = "PCIDEVICE_"

// Device is one prepared device of a claim.
type Device struct {
	// Request is the claim's request the device was allocated for
	// ("main" or "main/sub"); its environment variable is named after
	// the main request.
	Request string
	// Name is the device's name in its pool.
	Name string
	// Prepared is the device as the provisioner set it up.
	Prepared *devicev1.PreparedDevice
	// IfName is the device's interface name in the pod ("" for a device
	// without one, a vfio VF): what the netns check hook looks for.
	IfName string
}

// needsCDI reports whether the device gets a CDI device: a PCI function
// (its request's variable) or device nodes.
func (d Device) needsCDI(hook Hook) bool {
	return d.Prepared.GetDevice().GetPciAddress() != "" || len(d.Prepared.GetDeviceNodes()) > 0 ||
		(hook.Path != "" && d.IfName != "")
}

// Build returns the claim's spec and the CDI device ID of each device that
// has one, by device name; nil and no IDs when no device needs one.
func Build(claimUID string, devs []Device) (*cdi.Spec, map[string]string, error) {
	return build(claimUID, devs, Hook{})
}

// HookTimeout bounds the netns check hook, in seconds (the runtime kills
// it then and fails the creation): long enough for the attach of a burst
// of pods, which nri does beside the runtime (see nri's gatehook.HookTimeout).
const HookTimeout = 30

// Hook is the netns check hook dra puts on a claim's devices.
type Hook struct {
	// Path is the netdra-hook binary's path on the host; empty: no hook.
	Path string
	// GateSocket is nri's gate socket on the host, which the hook asks
	// first; empty: the hook only checks the netns.
	GateSocket string
}

// netnsHook is the createRuntime hook that fails a container's creation
// unless ifName is in its network namespace, run as `netdra-hook
// check-netns [-socket <gate>] -ifname <name>`.
func (h Hook) netnsHook(ifName string) *cdi.Hook {
	timeout := HookTimeout
	return &cdi.Hook{HookName: "createRuntime", Path: h.Path,
		Args: hookargs.CheckNetnsArgs(h.Path, h.GateSocket, ifName), Timeout: &timeout}
}

// build is Build with hook on each device with an interface.
func build(claimUID string, devs []Device, hook Hook) (*cdi.Spec, map[string]string, error) {
	if err := checkUID(claimUID); err != nil {
		return nil, nil, err
	}
	for _, d := range devs {
		if pci := d.Prepared.GetDevice().GetPciAddress(); !printable(pci) {
			return nil, nil, fmt.Errorf("CDI device of %s: PCI address %q has control characters", d.Name, pci)
		}
	}
	env := requestEnv(devs)
	spec := &cdi.Spec{Kind: Kind}
	ids := map[string]string{}
	for _, d := range devs {
		if !d.needsCDI(hook) {
			continue
		}
		name := claimUID + "-" + d.Name
		if err := parser.ValidateDeviceName(name); err != nil {
			return nil, nil, fmt.Errorf("CDI device of %s: %w", d.Name, err)
		}
		edits := cdi.ContainerEdits{}
		if v, ok := env[mainRequest(d.Request)]; ok && d.Prepared.GetDevice().GetPciAddress() != "" {
			edits.Env = []string{v}
		}
		for _, n := range d.Prepared.GetDeviceNodes() {
			if err := checkNode(n); err != nil {
				return nil, nil, fmt.Errorf("CDI device of %s: %w", d.Name, err)
			}
			edits.DeviceNodes = append(edits.DeviceNodes, &cdi.DeviceNode{Path: n.GetPath(), HostPath: n.GetHostPath(), Type: "c"})
		}
		if hook.Path != "" && d.IfName != "" {
			if err := claimconfig.ValidateIfName("ifName", d.IfName); err != nil {
				return nil, nil, fmt.Errorf("CDI device of %s: %w", d.Name, err)
			}
			edits.Hooks = append(edits.Hooks, hook.netnsHook(d.IfName))
		}
		spec.Devices = append(spec.Devices, cdi.Device{Name: name, ContainerEdits: edits})
		ids[d.Name] = parser.QualifiedName(Vendor, Class, name)
	}
	if len(spec.Devices) == 0 {
		return nil, nil, nil
	}
	v, err := cdi.MinimumRequiredVersion(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("CDI spec version: %w", err)
	}
	spec.Version = v
	return spec, ids, nil
}

// checkNode refuses a device node whose paths are not clean absolute
// paths: the runtime would refuse the whole spec (the provisioner checks
// them too; this is the writer's own guard for data read back).
func checkNode(n *devicev1.DeviceNode) error {
	for _, p := range []string{n.GetPath(), n.GetHostPath()} {
		if p == "" || !filepath.IsAbs(p) || filepath.Clean(p) != p || !printable(p) {
			return fmt.Errorf("device node path %q is not a clean absolute path of printable characters", p)
		}
	}
	return nil
}

// printable reports whether s is valid UTF-8 without control characters:
// the runtime reads a spec as YAML, which refuses them (the whole spec,
// and so every container of the claim, would fail).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

// requestEnv is each main request's variable, NAME=addr,addr, in the
// order of devs.
func requestEnv(devs []Device) map[string]string {
	addrs := map[string][]string{}
	var order []string
	for _, d := range devs {
		a := d.Prepared.GetDevice().GetPciAddress()
		if a == "" {
			continue
		}
		r := mainRequest(d.Request)
		if _, ok := addrs[r]; !ok {
			order = append(order, r)
		}
		addrs[r] = append(addrs[r], a)
	}
	out := map[string]string{}
	for _, r := range order {
		out[r] = EnvName(r) + "=" + strings.Join(addrs[r], ",")
	}
	return out
}

// EnvName is the variable that lists the PCI addresses of request:
// PCIDEVICE_NETDRA_IO_<REQUEST>, upper case, every character that is not
// a letter or a digit an underscore (request "dpdk-vf" is
// PCIDEVICE_NETDRA_IO_DPDK_VF).
func EnvName(request string) string {
	return EnvPrefix + strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z':
			return r - 'a' + 'A'
		case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			return r
		}
		return '_'
	}, Vendor+"/"+mainRequest(request))
}

func mainRequest(r string) string {
	main, _, _ := strings.Cut(r, "/")
	return main
}

// checkUID refuses a claim UID that cannot name a file and a CDI device.
func checkUID(uid string) error {
	if uid == "" || strings.Trim(uid, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-") != "" || len(uid) > 128 {
		return fmt.Errorf("claim UID %q cannot name a CDI spec", uid)
	}
	return nil
}

// Dir is a CDI spec directory netdra writes its specs into.
type Dir struct {
	path string
	hook Hook
}

// WithNetnsHook puts the netns check hook (netdra-hook check-netns,
// services/nri/cmd/netdra-hook) on every device with an interface: a container
// of the claim is then not created until its devices are in its network
// namespace, and, with h.GateSocket, until nri's gate said the pod's
// attach put them there (refused when nri is not running).
func (d *Dir) WithNetnsHook(h Hook) *Dir {
	d.hook = h
	return d
}

// New returns the spec directory at path; it is made (0755) at the first
// write when missing.
func New(path string) *Dir { return &Dir{path: cmp.Or(path, DefaultDir)} }

// Path is the directory.
func (d *Dir) Path() string { return d.path }

// filePrefix starts netdra's spec files, as the CDI library names
// transient specs (<vendor>-<class>_<id>).
const filePrefix = Vendor + "-" + Class + "_"

// File is the path of the claim's spec.
func (d *Dir) File(claimUID string) string {
	return filepath.Join(d.path, filePrefix+claimUID+".json")
}

// Write writes the claim's spec for devs and returns the CDI device IDs by
// device name. With no device that needs CDI, it writes nothing (and
// removes a spec the claim had).
func (d *Dir) Write(claimUID string, devs []Device) (map[string]string, error) {
	spec, ids, err := build(claimUID, devs, d.hook)
	if err != nil {
		return nil, err
	}
	if spec == nil {
		return nil, d.Remove(claimUID)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("CDI spec of claim %s: %w", claimUID, err)
	}
	if err := os.MkdirAll(d.path, 0o755); err != nil {
		return nil, fmt.Errorf("CDI spec directory: %w", err)
	}
	if err := writeAtomic(d.File(claimUID), data); err != nil {
		return nil, fmt.Errorf("writing the CDI spec of claim %s: %w", claimUID, err)
	}
	return ids, nil
}

// Remove removes the claim's spec; a missing one is no error.
func (d *Dir) Remove(claimUID string) error {
	if err := checkUID(claimUID); err != nil {
		return err
	}
	if err := os.Remove(d.File(claimUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the CDI spec of claim %s: %w", claimUID, err)
	}
	return nil
}

// Sweep removes every netdra spec whose claim UID is not in keep, and the
// temporary files of writes a crash interrupted. It returns the claim UIDs
// whose specs it removed, sorted.
func (d *Dir) Sweep(keep map[string]bool) ([]string, error) {
	entries, err := os.ReadDir(d.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing the CDI spec directory: %w", err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		uid, ok := specUID(e.Name())
		tmp := strings.HasPrefix(e.Name(), "."+filePrefix) && strings.HasSuffix(e.Name(), ".tmp")
		if (!ok || keep[uid]) && !tmp {
			continue
		}
		if err := os.Remove(filepath.Join(d.path, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
			continue
		}
		if ok {
			removed = append(removed, uid)
		}
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}

// specUID is the claim UID of a netdra spec file name.
func specUID(name string) (string, bool) {
	s, ok := strings.CutPrefix(name, filePrefix)
	if !ok {
		return "", false
	}
	uid, ok := strings.CutSuffix(s, ".json")
	return uid, ok && checkUID(uid) == nil
}

// writeAtomic writes data to path so that a reader sees the old file or
// the new one, never part of one (WriteFile, mode 0644). Nothing is
// fsynced, since this is on every prepare's path and a sync waits on the
// disk: the specs are the state service's rows written out, and dra
// writes every prepared claim's spec again and sweeps the rest before it
// registers with the kubelet (Driver.Recover), so a spec a node crash cut
// or lost is rewritten before a container can ask for it. The DaemonSet's
// directory, /var/run/cdi, is a tmpfs anyway.
func writeAtomic(path string, data []byte) error {
	return WriteFile(path, data, 0o644)
}

// WriteFile writes data to path so that a reader sees the old file or the
// new one, never part of one: a hidden temporary file beside it (not
// *.json, which the runtime would read), given perm, renamed over path.
// It does not fsync: the file survives the writer's crash (the page cache
// holds it) but not necessarily the node's, so it suits files that are
// written again after a reboot before anything reads them. On failure
// path is as it was and no temporary file is left.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, there is none
	_, err = f.Write(data)
	if err = errors.Join(err, f.Chmod(perm), f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
