package dummy

import (
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/provisioner/settingrules"
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
	return settingrules.RefuseVF("dummy", cfg)
}
