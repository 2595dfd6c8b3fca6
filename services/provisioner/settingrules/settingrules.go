// Package settingrules holds the rules for which of a claim's device settings
// each kind of device honours: the VF settings only an SR-IOV PF can
// enforce, and the VLAN settings the eBPF programs enforce in software on
// every device. The managers' Validate and the server's checks call them,
// so a setting means the same on every manager.
package settingrules

import (
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// RefuseVF returns a *fielderr.Error naming the first setting cfg
// sets that a manager without SR-IOV VFs, called mgr, cannot enforce
// (trust, linkState, minTxRate, maxTxRate), or a bad software VLAN, or
// nil. A field counts as set when it is present, even at its zero value.
//
// vlan, vlanQoS, vlanProto and spoofChk are accepted: the provisioner
// enforces them in software, with eBPF programs on the device in the pod
// (package ebpf), so the same claim config means the same on every
// manager. vlan 0 is no VLAN; vlanQoS (0..7) and vlanProto need a vlan.
func RefuseVF(mgr string, cfg *devicev1.DeviceConfig) error {
	if cfg == nil {
		return nil
	}
	const noVF = "not an SR-IOV VF"
	for _, f := range []struct {
		field string
		set   bool
	}{
		{"trust", cfg.Trust != nil},
		{"linkState", cfg.GetLinkState() != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED},
		{"minTxRate", cfg.MinTxRate != nil},
		{"maxTxRate", cfg.MaxTxRate != nil},
	} {
		if f.set {
			return fielderr.New("config."+f.field, "not supported by the %s manager (%s); only sr-iov devices take it", mgr, noVF)
		}
	}
	return SoftwareVLAN(cfg)
}

// SoftwareVLAN checks the VLAN settings the eBPF programs enforce
// (vlan, vlanQoS, vlanProto), returning a *fielderr.Error naming the
// first bad one ("config.vlan") or nil. A nil cfg is valid.
func SoftwareVLAN(cfg *devicev1.DeviceConfig) error {
	vlan := cfg.GetVlan()
	switch {
	case vlan > 4094:
		return fielderr.New("config.vlan", "%d is out of range 0..4094", vlan)
	case cfg.GetVlanQos() > 7:
		return fielderr.New("config.vlanQoS", "%d is out of range 0..7", cfg.GetVlanQos())
	case cfg.GetVlanQos() != 0 && vlan == 0:
		return fielderr.New("config.vlanQoS", "needs a non-zero vlan")
	case cfg.GetVlanProto() != devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED && vlan == 0:
		return fielderr.New("config.vlanProto", "needs a non-zero vlan")
	}
	if _, ok := devicev1.VlanProto_name[int32(cfg.GetVlanProto())]; !ok {
		return fielderr.New("config.vlanProto", "unknown VLAN protocol %d", cfg.GetVlanProto())
	}
	return nil
}
