package sriov

import (
	"net"
	"path/filepath"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Ranges of the VF settings (the kernel's ifla_vf_vlan and the SR-IOV CNI's).
const (
	maxVlan = 4094
	maxQos  = 7
)

// validate checks the VF fields of cfg for dev, reading the PF's MTU from
// sysfsRoot. Rules, after the SR-IOV CNI: vlan 0..4094 (0 clears; 4095 is reserved by 802.1Q);
// vlanQoS 0..7, only with a vlan, and non-zero only with a non-zero one;
// vlanProto only with a non-zero vlan; macAddress a unicast, non-zero
// 48-bit address; linkState auto, enable or disable; minTxRate no more than
// a non-zero maxTxRate; mtu no more than the PF's; and for a VF with no
// kernel netdev (vfio-bound, DPDK) nothing that only a netdev can take
// (mtu, addresses, routes, ipPools); vfio true only for a VF bound to
// vfio-pci, false only for one that is not. dev must be a VF (ErrNotVF).
func validate(sysfsRoot string, dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if _, _, err := vfOf(dev); err != nil {
		return err
	}
	if cfg == nil {
		return nil
	}
	if err := validateVfio(dev, cfg); err != nil {
		return err
	}
	if err := validateVlan(cfg); err != nil {
		return err
	}
	if cfg.GetMacAddress() != "" {
		if _, err := parseMAC("config.macAddress", cfg.GetMacAddress()); err != nil {
			return err
		}
	}
	if ls := cfg.GetLinkState(); ls != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED {
		if _, ok := kernelLinkState(ls); !ok {
			return fielderr.New("config.linkState", "%v is not auto, enable or disable", ls)
		}
	}
	if lo, hi := cfg.GetMinTxRate(), cfg.GetMaxTxRate(); lo != 0 && hi != 0 && lo > hi {
		return fielderr.New("config.minTxRate", "%d Mbps is more than maxTxRate, %d Mbps", lo, hi)
	}
	if dev.GetKernelIfName() == "" {
		return validateNoNetdev(dev, cfg)
	}
	if mtu := cfg.GetMtu(); mtu != 0 {
		// An unreadable PF MTU is not the config's fault: Setup reports
		// a missing PF.
		if pfMTU, err := readUint(filepath.Join(sysfsRoot, "class", "net", dev.GetPfName(), "mtu")); err == nil && uint64(mtu) > pfMTU {
			return fielderr.New("config.mtu", "%d is more than the MTU of the PF %s, %d", mtu, dev.GetPfName(), pfMTU)
		}
	}
	return nil
}

func validateVlan(cfg *devicev1.DeviceConfig) error {
	vlan, hasVlan := cfg.GetVlan(), cfg.Vlan != nil
	if vlan > maxVlan {
		return fielderr.New("config.vlan", "%d is out of range 0..%d", vlan, maxVlan)
	}
	if cfg.VlanQos != nil {
		qos := cfg.GetVlanQos()
		switch {
		case !hasVlan:
			return fielderr.New("config.vlanQoS", "set without config.vlan")
		case qos > maxQos:
			return fielderr.New("config.vlanQoS", "%d is out of range 0..%d", qos, maxQos)
		case qos != 0 && vlan == 0:
			return fielderr.New("config.vlanQoS", "%d needs a non-zero config.vlan", qos)
		}
	}
	switch p := cfg.GetVlanProto(); p {
	case devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED:
	case devicev1.VlanProto_VLAN_PROTO_8021Q, devicev1.VlanProto_VLAN_PROTO_8021AD:
		if vlan == 0 {
			return fielderr.New("config.vlanProto", "%v needs a non-zero config.vlan", p)
		}
	default:
		return fielderr.New("config.vlanProto", "%v is not 802.1q or 802.1ad", p)
	}
	return nil
}

// validateNoNetdev rejects what only a kernel netdev can take.
func validateNoNetdev(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	why := "VF " + dev.GetName() + " has no kernel netdev"
	if dev.GetDriver() != "" {
		why += " (bound to " + dev.GetDriver() + ")"
	}
	switch {
	case cfg.GetMtu() != 0:
		return fielderr.New("config.mtu", "%s", why)
	case len(cfg.GetAddresses()) > 0:
		return fielderr.New("config.addresses", "%s", why)
	case len(cfg.GetRoutes()) > 0:
		return fielderr.New("config.routes", "%s", why)
	case len(cfg.GetIpPools()) > 0:
		return fielderr.New("config.ipPools", "%s", why)
	case cfg.GetDhcp():
		return fielderr.New("config.dhcp", "%s", why)
	}
	return nil
}

// parseMAC parses a MAC address a VF can take: 48 bits, unicast, not zero.
func parseMAC(field, s string) (net.HardwareAddr, error) {
	mac, err := net.ParseMAC(s)
	switch {
	case err != nil:
		return nil, fielderr.New(field, "%q is not a MAC address", s)
	case len(mac) != 6:
		return nil, fielderr.New(field, "%q is not a 48-bit Ethernet address", s)
	case mac[0]&1 != 0:
		return nil, fielderr.New(field, "%q is a multicast address", s)
	case [6]byte(mac) == [6]byte{}:
		return nil, fielderr.New(field, "%q is all zeros", s)
	}
	return mac, nil
}
