package nodeconfig

import (
	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	provisionerv1 "github.com/netdra/netdra/protos/netdra/provisioner/v1"
	"github.com/netdra/netdra/shared/apis/v1alpha1"
)

// subifKinds and subifModes map the NodeConfig's names onto the
// provisioner's enums; a name that is not there (Validate refuses it)
// maps to UNSPECIFIED, which the provisioner refuses in turn.
var (
	subifKinds = map[v1alpha1.SubifKind]devicev1.SubInterfaceKind{
		v1alpha1.SubifMacvlan: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN,
		v1alpha1.SubifIPvlan:  devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_IPVLAN,
		v1alpha1.SubifVLAN:    devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN,
	}
	subifModes = map[string]devicev1.SubInterfaceMode{
		"bridge":   devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE,
		"private":  devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PRIVATE,
		"vepa":     devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_VEPA,
		"passthru": devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PASSTHRU,
		"l2":       devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L2,
		"l3":       devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3,
		"l3s":      devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_IPVLAN_L3S,
	}
)

// subif is the subif manager's configuration of c.
func subif(c *v1alpha1.SubifConfig) *provisionerv1.SubifConfig {
	out := &provisionerv1.SubifConfig{Enabled: c.Enabled}
	for _, p := range c.Parents {
		out.Parents = append(out.Parents, &provisionerv1.SubifParent{
			Name:              p.Name,
			ParentIfName:      p.ParentIfName,
			Kind:              subifKinds[p.Kind],
			Mode:              subifModes[p.Mode],
			Count:             uint32(max(p.Count, 0)),
			VlanId:            uint32(max(p.VLANID, 0)),
			AllowDefaultRoute: p.AllowDefaultRoute,
			Bandwidth:         bitsPerSecond(p.Capacity, false),
			DefaultBandwidth:  bitsPerSecond(p.Capacity, true),
		})
	}
	return out
}

// bitsPerSecond is a shared parent's bandwidth, or its default request
// (0 when unset: the whole bandwidth); 0 for a parent not shared.
// Validate has checked both.
func bitsPerSecond(c *v1alpha1.SubifCapacity, def bool) uint64 {
	if c == nil {
		return 0
	}
	s := c.Bandwidth
	if def {
		s = c.DefaultRequest
	}
	if s == "" {
		return 0
	}
	v, err := v1alpha1.BitsPerSecond(s)
	if err != nil {
		return 0
	}
	return uint64(max(v, 0))
}
