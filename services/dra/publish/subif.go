package publish

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

// A sub-interface's attributes (its driver attribute is its kind:
// macvlan, ipvlan, vlan).
const (
	attrParent resourceapi.QualifiedName = "parentIfName"
	attrMode   resourceapi.QualifiedName = "mode"
	attrVLANID resourceapi.QualifiedName = "vlanId"
)

// subifAttributes adds a sub-interface's parentIfName, mode (bridge,
// l3s...) and the VLAN ID its entry fixes. (A VF's parent is its pfName.)
func subifAttributes(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, d *devicev1.Device) {
	sub := d.GetSubInterface()
	if sub == nil {
		return
	}
	attrs[attrParent] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(sub.GetParentIfName()))}
	if m := sub.GetMode(); m != devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_UNSPECIFIED {
		name := m.String()[strings.LastIndexByte(m.String(), '_')+1:]
		attrs[attrMode] = resourceapi.DeviceAttribute{StringValue: ptr.To(strings.ToLower(name))}
	}
	if id := sub.GetVlanId(); id != 0 {
		attrs[attrVLANID] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(id))}
	}
}
