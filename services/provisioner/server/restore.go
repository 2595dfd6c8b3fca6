package server

import (
	"context"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// A prepared device read back from a claim status (Restore) is untrusted:
// whoever can write the claim's status wrote it. What Attach, Detach and
// Free would do with it is bounded here, before it is trusted: its device
// must be one the provisioner offers now, the same kernel object, and
// shaped as its manager's Setup makes them. So a forged status cannot name
// an interface the managers never offer (a default-route uplink, a bridge
// port of one, a link no pool's filter selects), pass one device's
// interface off under another's name, or carry a restore recipe that
// renames a link or VF settings for a device that has none.

// restoreWait bounds how long Restore waits for a manager started moments
// ago (dra configures the provisioner, then recovers) to report its devices.
const restoreWait = 30 * time.Second

// checkRestored checks pd (field names it) against the inventory and the
// rules of its manager, and replaces its device with the inventory's copy.
// A device the provisioner does not offer, or offers as another, is a
// *fielderr.Error (InvalidArgument: the data will never do); a manager that
// has not reported yet is Unavailable (try again).
func (s *Server) checkRestored(ctx context.Context, field string, pd *devicev1.PreparedDevice) error {
	kind, name := pd.GetDevice().GetManager(), pd.GetDevice().GetName()
	if err := s.managers.awaitPublished(ctx, field+".device.manager", kind); err != nil {
		return err
	}
	dev, ok := s.inv.find(kind, name)
	if !ok {
		return fielderr.New(field+".device.name", "%q is not in the inventory of the %s manager: the provisioner does not offer it", name, kind)
	}
	if err := sameDevice(field+".device", dev, pd.GetDevice()); err != nil {
		return err
	}
	if err := checkShape(field, kind, pd); err != nil {
		return err
	}
	restored, err := restoredShare(field, dev, pd)
	if err != nil {
		return err
	}
	pd.Device = restored
	return nil
}

// restoredShare is the inventory's dev with the share pd's Setup recorded
// for a shared device (its bandwidth no more than the capacity) and the
// egress rate it holds. A share on a device not shared, or none on a
// shared one, is refused.
func restoredShare(field string, dev *devicev1.Device, pd *devicev1.PreparedDevice) (*devicev1.Device, error) {
	got := pd.GetDevice()
	out, err := withShare(dev, got.GetShare())
	if err != nil {
		return nil, fielderr.Prefix(field+".device", err)
	}
	out = proto.CloneOf(out)
	if sh := out.GetShare(); sh != nil {
		if sh.GetBandwidth() == 0 || sh.GetBandwidth() > dev.GetBandwidthCapacity() {
			return nil, fielderr.New(field+".device.share.bandwidth", "%d is out of range 1..%d (the bandwidth of %s)", sh.GetBandwidth(), dev.GetBandwidthCapacity(), dev.GetName())
		}
		if out.SubInterface != nil {
			out.SubInterface.EgressRate = sh.GetBandwidth()
		}
	}
	return out, nil
}

// awaitPublished waits until the running manager of kind has published its
// inventory, at most restoreWait.
func (ms *managers) awaitPublished(ctx context.Context, field string, kind devicev1.DeviceManager) error {
	ms.mu.Lock()
	r := ms.running[kind]
	ms.mu.Unlock()
	if r == nil || r.err() != nil {
		return fielderr.New(field, "the %s manager is not running: a device of it cannot be checked against its inventory", kind)
	}
	ctx, cancel := context.WithTimeout(ctx, restoreWait)
	defer cancel()
	select {
	case <-r.published:
		return nil
	case <-r.done:
		return status.Errorf(codes.Unavailable, "the %s manager stopped before it reported its devices", kind)
	case <-ctx.Done():
		return status.Errorf(codes.Unavailable, "the %s manager has not reported its devices yet", kind)
	}
}

// sameDevice checks that got names the kernel object the inventory's dev
// is: the same interface, PCI function, PF and VF index. The other fields
// (MAC, MTU, attributes, link state) are what discovery sees now, and
// are taken from dev.
func sameDevice(field string, dev, got *devicev1.Device) error {
	for _, f := range []struct {
		name      string
		have, was string
	}{
		{"kernelIfName", dev.GetKernelIfName(), got.GetKernelIfName()},
		{"pciAddress", dev.GetPciAddress(), got.GetPciAddress()},
		{"pfName", dev.GetPfName(), got.GetPfName()},
	} {
		if f.have != f.was {
			return fielderr.New(field+"."+f.name, "%q, but the provisioner's %s has %q", f.was, dev.GetName(), f.have)
		}
	}
	if (dev.VfIndex == nil) != (got.VfIndex == nil) || dev.GetVfIndex() != got.GetVfIndex() {
		return fielderr.New(field+".vfIndex", "%s, but the provisioner's %s has %s", vfIndex(got), dev.GetName(), vfIndex(dev))
	}
	return nil
}

func vfIndex(d *devicev1.Device) string {
	if d.VfIndex == nil {
		return "none"
	}
	return strconv.Itoa(int(d.GetVfIndex()))
}

// checkShape checks pd against what its manager's Setup records: the
// original link named as the device's interface (Detach renames the link
// back to it); a created link for a dummy or a sub-interface only; VF
// settings and a vfio binding for a VF only (one whose claim set no VF
// setting and no vfio has neither); detached eBPF programs for a host
// interface only.
func checkShape(field string, kind devicev1.DeviceManager, pd *devicev1.PreparedDevice) error {
	ifName := pd.GetDevice().GetKernelIfName()
	if ol := pd.GetOriginalLink(); ol != nil && ol.GetName() != ifName {
		return fielderr.New(field+".originalLink.name", "%q is not the device's interface %q", ol.GetName(), ifName)
	}
	created := kind == devicev1.DeviceManager_DEVICE_MANAGER_DUMMY || kind == devicev1.DeviceManager_DEVICE_MANAGER_SUBIF
	sriov := kind == devicev1.DeviceManager_DEVICE_MANAGER_SRIOV
	host := kind == devicev1.DeviceManager_DEVICE_MANAGER_HOST
	switch {
	case pd.GetLinkCreated() != created:
		return fielderr.New(field+".linkCreated", "%t for a device of the %s manager: netdra creates the links of dummy devices and sub-interfaces only", pd.GetLinkCreated(), kind)
	case pd.GetOriginalVf() != nil && !sriov:
		// A VF has none either when its claim set no VF setting.
		return fielderr.New(field+".originalVf", "set for a device of the %s manager: only SR-IOV VFs have VF settings", kind)
	case pd.GetVfioBinding() != nil && !sriov:
		return fielderr.New(field+".vfioBinding", "set for a device of the %s manager: only SR-IOV VFs are bound to vfio-pci by netdra", kind)
	case len(pd.GetDetachedEbpfPrograms()) > 0 && !host:
		return fielderr.New(field+".detachedEbpfPrograms", "set for a device of the %s manager: only host interfaces have their programs taken off", kind)
	case sriov && ifName == "" && pd.GetOriginalLink() != nil:
		return fielderr.New(field+".originalLink", "set for a VF without a kernel interface")
	}
	return nil
}
