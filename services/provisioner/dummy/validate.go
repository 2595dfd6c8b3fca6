package dummy

import (
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/fielderr"
)

// Validate checks that dev is one of this manager's devices and that cfg
// asks nothing a dummy link cannot do: the VF settings (vlan, vlanQoS,
// vlanProto, spoofChk, trust, linkState, minTxRate, maxTxRate) apply only
// to SR-IOV VFs. It returns a *fielderr.Error for the first bad field
// ("config.vlan"). The fields every device takes (podIfName, macAddress,
// mtu, addresses, routes) are the link package's to check.
func (m *Manager) Validate(dev *devicev1.Device, cfg *devicev1.DeviceConfig) error {
	if err := m.checkDevice(dev); err != nil {
		return err
	}
	return vfOnly("dummy", cfg)
}

// vfOnly returns a *fielderr.Error naming the first VF-only setting cfg
// sets, for the manager called mgr, or nil. A field counts as set when it
// is present, even at its zero value (vlan 0 asks to clear a VF's VLAN).
func vfOnly(mgr string, cfg *devicev1.DeviceConfig) error {
	if cfg == nil {
		return nil
	}
	const (
		noVLAN = "no hardware VLAN"
		noVF   = "not an SR-IOV VF"
	)
	for _, f := range []struct {
		field string
		set   bool
		why   string
	}{
		{"vlan", cfg.Vlan != nil, noVLAN},
		{"vlanQoS", cfg.VlanQos != nil, noVLAN},
		{"vlanProto", cfg.GetVlanProto() != devicev1.VlanProto_VLAN_PROTO_UNSPECIFIED, noVLAN},
		{"spoofChk", cfg.SpoofChk != nil, noVF},
		{"trust", cfg.Trust != nil, noVF},
		{"linkState", cfg.GetLinkState() != devicev1.VfLinkState_VF_LINK_STATE_UNSPECIFIED, noVF},
		{"minTxRate", cfg.MinTxRate != nil, noVF},
		{"maxTxRate", cfg.MaxTxRate != nil, noVF},
	} {
		if f.set {
			return fielderr.New("config."+f.field, "not supported by the %s manager (%s); only sr-iov devices take it", mgr, f.why)
		}
	}
	return nil
}
