package ebpf

import (
	"fmt"
	"net"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// The VLAN protocols, as EtherTypes.
const (
	EtherType8021Q  = 0x8100
	EtherType8021AD = 0x88a8
)

// Policy is what the programs on a device enforce. The zero Policy
// enforces nothing: the programs only count.
type Policy struct {
	// SpoofChk drops egress frames whose source MAC is not MAC.
	SpoofChk bool
	MAC      net.HardwareAddr
	// VLAN, when not 0, is pushed on egress frames with priority QoS and
	// protocol Proto; ingress frames without that VLAN ID and protocol are
	// dropped, the others untagged.
	VLAN  uint16
	QoS   uint8
	Proto uint16
}

// SoftwarePolicy is the policy a claim's cfg asks of a device whose
// hardware has no VLAN or spoof check (host, dummy): vlan (1..4094; 0 is
// no VLAN) with vlanQoS and vlanProto (802.1Q when unspecified), spoofChk
// against cfg's MAC or, without one, mac (the device's own). cfg has been
// validated.
func SoftwarePolicy(cfg *devicev1.DeviceConfig, mac string) (Policy, error) {
	var p Policy
	if cfg.GetSpoofChk() {
		s := cfg.GetMacAddress()
		if s == "" {
			s = mac
		}
		hw, err := net.ParseMAC(s)
		if err != nil || len(hw) != 6 {
			return Policy{}, fmt.Errorf("spoof check: the device has no Ethernet MAC address (%q)", s)
		}
		p.SpoofChk, p.MAC = true, hw
	}
	if v := cfg.GetVlan(); v != 0 {
		p.VLAN, p.QoS, p.Proto = uint16(v), uint8(cfg.GetVlanQos()), EtherType8021Q
		if cfg.GetVlanProto() == devicev1.VlanProto_VLAN_PROTO_8021AD {
			p.Proto = EtherType8021AD
		}
	}
	return p, nil
}

// Enforces reports whether p asks for more than counting: a spoof check or
// a VLAN.
func (p Policy) Enforces() bool { return p.SpoofChk || p.VLAN != 0 }

func (p Policy) value() netdraPolicy {
	var v netdraPolicy
	if p.SpoofChk {
		v.SpoofChk = 1
		copy(v.Mac[:], p.MAC)
	}
	if p.VLAN != 0 {
		v.VlanTci = p.VLAN&0x0fff | uint16(p.QoS&7)<<13
		v.VlanProto = p.Proto
	}
	return v
}
