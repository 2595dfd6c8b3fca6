package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/link"
	"github.com/netdra/netdra/services/provisioner/manager"
	"github.com/netdra/netdra/services/provisioner/rdma"
	"github.com/netdra/netdra/services/provisioner/settingrules"
	"github.com/netdra/netdra/shared/claimconfig"
	"github.com/netdra/netdra/shared/fielderr"
	"github.com/netdra/netdra/shared/managername"
)

// maxDeviceNodes bounds the device nodes of one prepared device (a vfio
// VF has two; an RDMA device a few more).
const maxDeviceNodes = 16

// dnsLabel is the form of a device name (RFC 1123 label), as ResourceSlices
// publish it.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// maxPathLen is the longest path the kernel opens (PATH_MAX less the NUL).
const maxPathLen = 4095

// The trust boundary: every request's fields are checked here before the
// provisioner touches the node, and a bad one is InvalidArgument naming
// the field.

// validateSysfsRoot checks a sysfs root given to Configure: empty (the
// provisioner's default), or a clean absolute path to a directory.
func validateSysfsRoot(field, root string) error {
	if root == "" {
		return nil
	}
	if !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return fielderr.New(field, "%q is not a clean absolute path", root)
	}
	fi, err := os.Stat(root)
	switch {
	case err != nil:
		return fielderr.New(field, "%q cannot be used: %v", root, errors.Unwrap(err))
	case !fi.IsDir():
		return fielderr.New(field, "%q is not a directory", root)
	}
	return nil
}

// validateConfig is Setup's check of cfg for dev: the fields every device
// takes (link.Validate), vfio only for an SR-IOV VF, dhcp only for a link
// that moves, then the manager's own.
func validateConfig(mgr manager.Manager, dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if err := link.Validate(cfg); err != nil {
		return fielderr.Prefix("config", err)
	}
	if cfg.GetVfio() && dev.GetManager() != devicev1.DeviceManager_DEVICE_MANAGER_SRIOV {
		return fielderr.New("config.vfio", "device %s is a %s device; only an SR-IOV VF bound to vfio-pci has a vfio device",
			dev.GetName(), managername.Of(dev.GetManager()))
	}
	if cfg.GetDhcp() && (dev.GetManager() == devicev1.DeviceManager_DEVICE_MANAGER_DUMMY || dev.GetManager() == devicev1.DeviceManager_DEVICE_MANAGER_SUBIF) {
		// The lease's client lives from Attach to Detach; a link made in
		// the pod can go with its netns without a Detach, and the client
		// would then hold that netns.
		return fielderr.New("config.dhcp", "device %s is a %s device, made in the pod; only a link that moves into the pod (host, SR-IOV) takes DHCP",
			dev.GetName(), managername.Of(dev.GetManager()))
	}
	return mgr.Validate(dev, cfg)
}

// validateDeviceNodes checks the device nodes dra writes into a CDI spec
// for the containers: clean absolute host paths, container paths under
// /dev, each container path once.
func validateDeviceNodes(field string, nodes []*devicev1.DeviceNode) error {
	if len(nodes) > maxDeviceNodes {
		return fielderr.New(field, "%d device nodes; at most %d", len(nodes), maxDeviceNodes)
	}
	seen := map[string]bool{}
	for i, n := range nodes {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := validatePath(f+".hostPath", n.GetHostPath()); err != nil {
			return err
		}
		if err := validatePath(f+".path", n.GetPath()); err != nil {
			return err
		}
		if !strings.HasPrefix(n.GetPath(), "/dev/") {
			return fielderr.New(f+".path", "%q is not under /dev", n.GetPath())
		}
		if seen[n.GetPath()] {
			return fielderr.New(f+".path", "%q is given twice", n.GetPath())
		}
		seen[n.GetPath()] = true
	}
	return nil
}

// validatePrepared checks what Attach, Detach and Free use of a prepared
// device: its name (a DNS label, as published; the eBPF programs are
// pinned under it), its manager, and the interface names and MAC a link
// is moved and restored with.
func validatePrepared(field string, pd *devicev1.PreparedDevice) error {
	if pd == nil {
		return fielderr.New(field, "required")
	}
	if err := validateDevice(field+".device", pd.GetDevice()); err != nil {
		return err
	}
	if id := pd.GetDevice().GetShare().GetId(); pd.GetDevice().GetShare() != nil && !shareID.MatchString(id) {
		return fielderr.New(field+".device.share.id", "%q is not a share ID (a UUID: lower-case hex digits and '-', at most 63 characters)", id)
	}
	if pd.GetDevice().GetKernelIfName() != "" && pd.GetOriginalLink() == nil && !pd.GetLinkCreated() {
		return fielderr.New(field+".originalLink", "required for a device with a kernel interface")
	}
	if err := claimconfig.ValidateIfName(field+".device.kernelIfName", pd.GetDevice().GetKernelIfName()); err != nil {
		return err
	}
	if err := claimconfig.ValidateIfName(field+".originalLink.name", pd.GetOriginalLink().GetName()); err != nil {
		return err
	}
	if mac := pd.GetOriginalLink().GetMacAddress(); mac != "" {
		if _, err := net.ParseMAC(mac); err != nil {
			return fielderr.New(field+".originalLink.macAddress", "%q is not a MAC address", mac)
		}
	}
	if err := validateSub(field+".device.subInterface", pd.GetDevice().GetSubInterface()); err != nil {
		return err
	}
	if err := claimconfig.ValidateLinkSettings(field+".originalLink.settings.", pd.GetOriginalLink().GetSettings()); err != nil {
		return err
	}
	if err := validateVFSnapshot(field+".originalVf", pd.GetOriginalVf()); err != nil {
		return err
	}
	if err := validateDeviceNodes(field+".deviceNodes", pd.GetDeviceNodes()); err != nil {
		return err
	}
	if r := pd.GetDevice().GetRdmaDevice(); r != "" {
		if pd.GetDevice().GetKernelIfName() == "" || pd.GetLinkCreated() {
			return fielderr.New(field+".device.rdmaDevice", "%q, but the device has no host link for it to move with", r)
		}
		if err := rdma.ValidateName(field+".device.rdmaDevice", r); err != nil {
			return err
		}
	}
	for i, p := range pd.GetDetachedEbpfPrograms() {
		if err := validateProgram(fmt.Sprintf("%s.detachedEbpfPrograms[%d]", field, i), p, pd.GetDevice().GetName()); err != nil {
			return err
		}
	}
	return nil
}

// validateVFSnapshot checks the VF settings Free restores: what a VF can
// have had (a VLAN 0..4095, a priority 0..7, known protocol and link
// state, a MAC).
func validateVFSnapshot(field string, vf *devicev1.VfSnapshot) error {
	if vf == nil {
		return nil
	}
	_, protoOK := devicev1.VlanProto_name[int32(vf.GetVlanProto())]
	_, stateOK := devicev1.VfLinkState_name[int32(vf.GetLinkState())]
	switch {
	case vf.GetVlan() > 4095:
		return fielderr.New(field+".vlan", "%d is out of range 0..4095", vf.GetVlan())
	case vf.GetVlanQos() > 7:
		return fielderr.New(field+".vlanQos", "%d is out of range 0..7", vf.GetVlanQos())
	case !protoOK:
		return fielderr.New(field+".vlanProto", "unknown VLAN protocol %d", vf.GetVlanProto())
	case !stateOK:
		return fielderr.New(field+".linkState", "unknown link state %d", vf.GetLinkState())
	}
	if mac := vf.GetMacAddress(); mac != "" {
		if _, err := net.ParseMAC(mac); err != nil {
			return fielderr.New(field+".macAddress", "%q is not a MAC address", mac)
		}
	}
	return nil
}

// validateProgram checks a host eBPF program Free gives back: a known
// attach point, and a pin (if any) where the hand-off keeps the device's,
// a file in a directory named after the device.
func validateProgram(field string, p *devicev1.EbpfProgram, device string) error {
	if _, ok := devicev1.EbpfAttachPoint_name[int32(p.GetAttachPoint())]; !ok || p.GetAttachPoint() == devicev1.EbpfAttachPoint_EBPF_ATTACH_POINT_UNSPECIFIED {
		return fielderr.New(field+".attachPoint", "unknown attach point %d", p.GetAttachPoint())
	}
	if pin := p.GetPin(); pin != "" {
		if err := validatePath(field+".pin", pin); err != nil {
			return err
		}
		if filepath.Base(filepath.Dir(pin)) != device {
			return fielderr.New(field+".pin", "%q is not a pin of device %s", pin, device)
		}
	}
	return nil
}

// validateDevice checks the identity of a device a request carries: its
// name and its manager (field.name, field.manager).
func validateDevice(field string, d *devicev1.Device) error {
	return validateDeviceRef(field+".name", d.GetName(), field+".manager", d.GetManager())
}

// validateDeviceRef checks the identity of a device a request names: name
// (a DNS label, as published), in the field nameField, and its manager,
// in managerField.
func validateDeviceRef(nameField, name, managerField string, m devicev1.DeviceManager) error {
	switch {
	case name == "":
		return fielderr.New(nameField, "required")
	case !dnsLabel.MatchString(name):
		return fielderr.New(nameField, "%q is not a device name (a DNS label: lower-case letters, digits and '-', at most 63)", name)
	}
	if _, ok := devicev1.DeviceManager_name[int32(m)]; !ok || m == devicev1.DeviceManager_DEVICE_MANAGER_UNSPECIFIED {
		return fielderr.New(managerField, "unknown device manager %v", m)
	}
	return nil
}

// validatePath checks a path the provisioner opens: a clean absolute path
// the kernel can take.
func validatePath(field, path string) error {
	switch {
	case path == "" || !filepath.IsAbs(path) || filepath.Clean(path) != path:
		return fielderr.New(field, "%q is not a clean absolute path", path)
	case len(path) > maxPathLen:
		return fielderr.New(field, "%d bytes, longer than a path can be (%d)", len(path), maxPathLen)
	}
	return nil
}

// validateMove is Attach's and Detach's trust boundary: the prepared
// device, the pod's netns path (clean and absolute) and the config
// (link.Validate) are checked here, once; the link package trusts them.
func (s *Server) validateMove(pd *devicev1.PreparedDevice, netnsPath string, cfg *devicev1.DeviceConfig) error {
	if err := validatePrepared("preparedDevice", pd); err != nil {
		return err
	}
	if err := validatePath("netnsPath", netnsPath); err != nil {
		return err
	}
	if err := link.Validate(cfg); err != nil {
		return fielderr.Prefix("config", err)
	}
	// The VLAN the eBPF programs enforce in the pod (a dummy's, a host
	// interface's) is the Attach config's.
	return settingrules.SoftwareVLAN(cfg)
}
