package subif

import (
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/settingrules"
	"github.com/netdra/netdra/shared/fielderr"
)

// Validate checks that dev is one of this manager's devices, as it
// publishes it, and that cfg asks nothing its kind of link cannot do,
// returning a *fielderr.Error for the first bad field:
//
//   - the VF settings (trust, linkState, minTxRate, maxTxRate) are
//     refused, as on every device that is not an SR-IOV VF;
//   - a VLAN link's vlan is its VLAN ID: required when its entry sets
//     none, and the entry's when it does; vlanQoS is the priority of the
//     frames it sends, vlanProto its protocol;
//   - on a macvlan, vlan, vlanQoS, vlanProto and spoofChk are enforced in
//     software, as on a dummy; a passthru macvlan takes no macAddress (it
//     has its parent's, and changing it would change the parent's);
//   - an ipvlan takes none of macAddress, spoofChk, vlan, vlanQoS and
//     vlanProto: it has its parent's MAC, so frames cannot be told apart by
//     source MAC, and in l3 modes it has no layer 2 to tag.
//
// The fields every device takes (podIfName, mtu, addresses, routes,
// ipPools) are the link package's to check; the MTU against the parent's
// is Setup's (it reads the parent).
func (m *Manager) Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	o, err := m.checkDevice(dev)
	if err != nil {
		return err
	}
	if err := settingrules.RefuseVF("subif", cfg); err != nil {
		return err
	}
	switch o.sub.GetKind() {
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN:
		return checkVLAN(o, cfg)
	case devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN:
		return checkIPVLAN(o, cfg)
	}
	if o.sub.GetMode() == devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU && cfg.GetMacAddress() != "" {
		return fielderr.New("config.macAddress", "a passthru macvlan has its parent %s's MAC address; setting one would change the parent's", o.sub.GetParentIfName())
	}
	return nil
}

func checkVLAN(o *offer, cfg *devicev1.DeviceConfig) error {
	want, got := o.sub.GetVlanId(), cfg.GetVlan()
	switch {
	case want == 0 && got == 0:
		return fielderr.New("config.vlan", "required: the VLAN ID of the link on %s (the devices of %q take theirs from the claim)", o.sub.GetParentIfName(), o.name)
	case want != 0 && got != 0 && got != want:
		return fielderr.New("config.vlan", "%d is not the VLAN of the devices of %q (%d)", got, o.name, want)
	}
	return nil
}

func checkIPVLAN(o *offer, cfg *devicev1.DeviceConfig) error {
	parent := o.sub.GetParentIfName()
	switch {
	case cfg.GetMacAddress() != "":
		return fielderr.New("config.macAddress", "an ipvlan has its parent %s's MAC address; only a macvlan or a vlan sub-interface takes one", parent)
	case cfg.SpoofChk != nil:
		return fielderr.New("config.spoofChk", "an ipvlan shares its parent %s's MAC address, so its frames cannot be checked by source MAC", parent)
	case cfg.GetVlan() != 0:
		return fielderr.New("config.vlan", "not supported on an ipvlan; use a vlan sub-interface of %s", parent)
	}
	return nil
}

// checkDevice checks that dev is a device this manager publishes, as it
// publishes it, and returns its entry.
func (m *Manager) checkDevice(dev *devicev1.Device) (*offer, error) {
	if k := dev.GetManager(); k != devicev1.DeviceManager_DEVICE_MANAGER_SUBIF {
		return nil, fielderr.New("device.manager", "%v is not the subif manager", k)
	}
	o, ok := m.offerOf(dev.GetName())
	if !ok {
		return nil, fielderr.New("device.name", "%q is not a device of the subif manager", dev.GetName())
	}
	if k, want := dev.GetKernelIfName(), kernelName(dev.GetName()); k != want {
		return nil, fielderr.New("device.kernelIfName", "%q is not %q, the device's link name", k, want)
	}
	if err := checkShare(o, dev); err != nil {
		return nil, err
	}
	s := dev.GetSubInterface()
	if s.GetKind() != o.sub.GetKind() || s.GetMode() != o.sub.GetMode() || s.GetParentIfName() != o.sub.GetParentIfName() || s.GetVlanId() != o.sub.GetVlanId() {
		return nil, fielderr.New("device.subInterface", "%v is not what %s offers (%v)", s, dev.GetName(), o.sub)
	}
	return o, nil
}

// checkShare checks a shared parent's device as published (its bandwidth)
// and the share it is set up for: each claim of a shared parent holds a
// share (an ID, a bandwidth of 1..capacity bits per second); a device of a
// counted entry holds none.
func checkShare(o *offer, dev *devicev1.Device) error {
	sh := dev.GetShare()
	switch {
	case dev.GetBandwidthCapacity() != o.bandwidth || dev.GetBandwidthDefault() != o.defaultBandwidth:
		return fielderr.New("device.bandwidthCapacity", "%d (default %d) is not what %s offers (%d, default %d)",
			dev.GetBandwidthCapacity(), dev.GetBandwidthDefault(), dev.GetName(), o.bandwidth, o.defaultBandwidth)
	case !o.shared() && sh != nil:
		return fielderr.New("share", "device %s is not shared by bandwidth: it takes no share", dev.GetName())
	case !o.shared():
		return nil
	case sh.GetId() == "":
		return fielderr.New("share.id", "required: device %s is shared by bandwidth, each claim holds a share of it", dev.GetName())
	case sh.GetBandwidth() == 0 || sh.GetBandwidth() > o.bandwidth:
		return fielderr.New("share.bandwidth", "%d is out of range 1..%d (the bandwidth of %s, bits per second)", sh.GetBandwidth(), o.bandwidth, dev.GetName())
	}
	return nil
}
