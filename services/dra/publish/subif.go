package publish

import (
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// CapacityBandwidth is the consumable capacity of a sub-interface parent
// shared by bandwidth, in bits per second: a claim asks for its share with
// capacity.requests.bandwidth in its device request.
const CapacityBandwidth resourceapi.QualifiedName = "bandwidth"

// MinShare is the smallest share of a shared parent the scheduler hands
// out (bits per second): a smaller request is rounded up to it.
const MinShare = 1_000_000

// sharedCapacity publishes a device shared by bandwidth (consumable
// capacity, DRAConsumableCapacity): allocatable to many claims at once,
// each consuming a share of its bandwidth — at least MinShare, at most the
// whole, the default share (the provisioner's) for a request that names
// none. A device not shared is left as it is: one claim at a time.
func sharedCapacity(out *resourceapi.Device, d *devicev1.Device) {
	bw := d.GetBandwidthCapacity()
	if bw == 0 {
		return
	}
	def := min(max(d.GetBandwidthDefault(), MinShare), bw)
	if d.GetBandwidthDefault() == 0 {
		def = bw
	}
	q := func(v uint64) *resource.Quantity { return resource.NewQuantity(int64(v), resource.DecimalSI) }
	out.AllowMultipleAllocations = ptr.To(true)
	out.Capacity = map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
		CapacityBandwidth: {
			Value: *q(bw),
			RequestPolicy: &resourceapi.CapacityRequestPolicy{
				Default:    q(def),
				ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: q(min(MinShare, bw)), Max: q(bw)},
			},
		},
	}
}
