// Package publish is everything of dra's ResourceSlice publication: it
// follows the state service's Watch (Publisher), assigns devices to pools
// by the pool rules (Assign), builds each pool's slices with their
// attributes, capacities and taints (Resources), and writes them to the
// apiserver (SliceWriter), coalescing a burst of changes into one
// publication. Pool names are translated at the API boundary by package
// slicepool, which the claim path uses too.
package publish

import (
	"cmp"
	"fmt"
	"maps"
	"regexp"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/managername"
)

// MaxDevicesPerSlice is the most devices one ResourceSlice holds: the
// API's limit for a slice whose devices have taints. Any device may be
// tainted at any moment (its link goes down, an address pool runs out),
// and a slice of more would then be refused, so every slice keeps to it
// rather than being cut again when a taint comes or goes.
const MaxDevicesPerSlice = resourceapi.ResourceSliceMaxDevicesWithAdvancedFeatures

// The driver's own attributes, unqualified: in the driver's domain
// (netdra.io/pool). The standard ones are deviceattribute's.
const (
	attrPool     resourceapi.QualifiedName = "pool"
	attrManager  resourceapi.QualifiedName = "deviceManager"
	attrIfName   resourceapi.QualifiedName = "ifName"
	attrKernel   resourceapi.QualifiedName = "kernelIfName"
	attrPFName   resourceapi.QualifiedName = "pfName"
	attrVFIndex  resourceapi.QualifiedName = "vfIndex"
	attrDriver   resourceapi.QualifiedName = "driver"
	attrVendor   resourceapi.QualifiedName = "vendor"
	attrDeviceID resourceapi.QualifiedName = "deviceID"
	attrMAC      resourceapi.QualifiedName = "macAddress"
	attrMTU      resourceapi.QualifiedName = "mtu"
	// attrRDMA is true for a device with an RDMA device, whose name is
	// attrRDMADevice; absent otherwise.
	attrRDMA       resourceapi.QualifiedName = "rdma"
	attrRDMADevice resourceapi.QualifiedName = "rdmaDevice"
	// attrNUMANode is deprecated in favour of the standard
	// resource.kubernetes.io/numaNode, which has the same value; it is
	// published for one more release, then removed.
	attrNUMANode resourceapi.QualifiedName = "numaNode"
)

// maxAttributes is how many attributes netdra itself gives a device at
// most: the standard three, the driver's own fourteen, a sub-interface's
// three and Multus's two (TestDevice_MaxAttributes).
const maxAttributes = 22

// maxAttrValLen is the API's limit on a string attribute.
const maxAttrValLen = 64

// Resources builds the driver's resources from the pools: every pool, even
// empty, in slices of at most MaxDevicesPerSlice devices, each unhealthy
// device tainted by its pool's effect (see Taints).
func Resources(ps []Pool) *resourceslice.DriverResources {
	out := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	for _, p := range ps {
		var devices []resourceapi.Device
		for _, d := range p.Devices {
			dev := Device(p.Name, d)
			dev.Taints = append(Taints(p.TaintEffect, d), ExhaustedTaints(p.ExhaustedIPPools)...)
			maps.Copy(dev.Attributes, MultusAttributes(p.MultusResourceName, d))
			devices = append(devices, dev)
		}
		pool := resourceslice.Pool{Slices: []resourceslice.Slice{{}}}
		if len(devices) > 0 {
			pool.Slices = nil
		}
		for len(devices) > 0 {
			n := min(len(devices), MaxDevicesPerSlice)
			pool.Slices = append(pool.Slices, resourceslice.Slice{Devices: devices[:n]})
			devices = devices[n:]
		}
		out.Pools[p.Name] = pool
	}
	return out
}

// TaintUnhealthy is the key of the taint on a device whose link is down
// (DRADeviceTaints): no carrier, or, for a sub-interface, a parent link
// that is down or gone.
const TaintUnhealthy = "netdra.io/unhealthy"

// TaintValueNoCarrier is the taint's value: what the provisioner saw.
const TaintValueNoCarrier = "link-down"

// TaintIPPoolExhausted is the key of the taint on every device of a pool
// one of whose address pools (the NodeConfig pool's ipPools) has no free
// address; its value is that address pool's name.
const TaintIPPoolExhausted = "netdra.io/ip-pool-exhausted"

// ExhaustedTaints are the NoSchedule taints, one per address pool named,
// that keep new claims off devices whose claims could get no address.
func ExhaustedTaints(ipPools []string) []resourceapi.DeviceTaint {
	var out []resourceapi.DeviceTaint
	for _, n := range ipPools {
		out = append(out, resourceapi.DeviceTaint{Key: TaintIPPoolExhausted, Value: n, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return out
}

// Taints are d's taints in a pool whose unhealthy-taint effect is effect
// ("" is NoSchedule, "None" none): one TaintUnhealthy while d's link is
// down (devicev1.LinkState_LINK_STATE_DOWN), none otherwise (up, no link
// to watch, administratively down: not in use). Its TimeAdded is left to
// the apiserver, and kept by dra's slice publisher while the taint stays.
func Taints(effect string, d *devicev1.Device) []resourceapi.DeviceTaint {
	if d.GetLinkState() != devicev1.LinkState_LINK_STATE_DOWN || effect == "None" {
		return nil
	}
	e := resourceapi.DeviceTaintEffectNoSchedule
	if effect == string(resourceapi.DeviceTaintEffectNoExecute) {
		e = resourceapi.DeviceTaintEffectNoExecute
	}
	return []resourceapi.DeviceTaint{{Key: TaintUnhealthy, Value: TaintValueNoCarrier, Effect: e}}
}

// The attributes Multus's DRA integration (multus-cni pkg/draclient) reads
// from a ResourceSlice's devices: it maps a device whose resourceName
// equals a NetworkAttachmentDefinition's k8s.v1.cni.cncf.io/resourceName
// annotation to that network, and hands its deviceID to the network's CNI
// plugin. It skips a device without both.
const (
	AttrMultusResourceName resourceapi.QualifiedName = "k8s.cni.cncf.io/resourceName"
	AttrMultusDeviceID     resourceapi.QualifiedName = "k8s.cni.cncf.io/deviceID"
)

// MultusAttributes are the Multus attributes of d in a pool whose
// multusResourceName is resourceName: none when it is "", otherwise
// AttrMultusResourceName and AttrMultusDeviceID, the device's PCI address
// (what the SR-IOV device plugin handed Multus as a VF's ID), or for a
// device without one its kernel interface name, or its device name (a
// sub-interface not yet created).
func MultusAttributes(resourceName string, d *devicev1.Device) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	if resourceName == "" {
		return nil
	}
	id := cmp.Or(d.GetPciAddress(), d.GetKernelIfName(), d.GetName())
	return map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		AttrMultusResourceName: {StringValue: ptr.To(truncate(resourceName))},
		AttrMultusDeviceID:     {StringValue: ptr.To(truncate(id))},
	}
}

// Device is d as published in pool: the manager's attributes plus pool and
// deviceManager, rdma and rdmaDevice for a device with an RDMA device, and
// the standard PCI attributes where known.
func Device(pool string, d *devicev1.Device) resourceapi.Device {
	// Sized for every attribute a device can have, so that the map is
	// made once instead of grown (and rehashed) as they are added: a
	// publication builds every device of the node.
	attrs := make(map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, maxAttributes+len(d.GetAttributes()))
	for _, a := range standardAttributes(d) {
		attrs[a.Name] = a.Value
	}
	str := func(name resourceapi.QualifiedName, v string) {
		if v != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(v))}
		}
	}
	str(attrPool, pool)
	str(attrManager, managername.Of(d.GetManager()))
	str(attrIfName, d.GetName())
	str(attrKernel, d.GetKernelIfName())
	str(attrPFName, d.GetPfName())
	str(attrDriver, d.GetDriver())
	str(attrVendor, d.GetVendorId())
	str(attrDeviceID, d.GetDeviceId())
	str(attrMAC, d.GetMacAddress())
	if d.VfIndex != nil {
		attrs[attrVFIndex] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetVfIndex()))}
	}
	if d.NumaNode != nil {
		attrs[attrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetNumaNode()))}
	}
	if d.GetMtu() != 0 {
		attrs[attrMTU] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetMtu()))}
	}
	subifAttributes(attrs, d)
	if d.GetRdmaDevice() != "" {
		attrs[attrRDMA] = resourceapi.DeviceAttribute{BoolValue: ptr.To(true)}
		str(attrRDMADevice, d.GetRdmaDevice())
	}
	for k, v := range d.GetAttributes() {
		if name := resourceapi.QualifiedName(k); !has(attrs, name) {
			str(name, v)
		}
	}
	out := resourceapi.Device{Name: d.GetName(), Attributes: attrs}
	sharedCapacity(&out, d)
	return out
}

// standardAttributes returns the standard attributes of d when it is a PCI
// function, as deviceattribute names and checks them:
// resource.kubernetes.io/pciBusID, and pcieRoot and numaNode (the scalar
// form, which needs no feature gate) when the provisioner found them. A
// device without a valid PCI address (a dummy, a veth) has none; a value
// deviceattribute refuses (a NUMA node out of range) is left out.
func standardAttributes(d *devicev1.Device) []deviceattribute.DeviceAttribute {
	bus, ok := pciBusIDAttribute(d.GetPciAddress())
	if !ok {
		return nil
	}
	out := []deviceattribute.DeviceAttribute{bus}
	if root := d.GetPcieRoot(); root != "" {
		out = append(out, deviceattribute.DeviceAttribute{
			Name:  deviceattribute.StandardDeviceAttributePCIeRoot,
			Value: resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(root))},
		})
	}
	if d.NumaNode != nil {
		if numa, err := deviceattribute.GetNUMANodeAttribute(int(d.GetNumaNode()), deviceattribute.ScalarAttribute); err == nil {
			out = append(out, numa)
		}
	}
	return out
}

// pciBusIDAttribute is deviceattribute.GetPCIBusIDAttribute's attribute,
// for a bus ID in its BDF form (0000:03:00.1, lower-case hex), which it
// checks the same way. That function compiles its regular expression at
// every call, which on a node with many VFs would be most of a
// publication's garbage and CPU; pciBDF is compiled once.
func pciBusIDAttribute(id string) (deviceattribute.DeviceAttribute, bool) {
	if !pciBDF.MatchString(id) {
		return deviceattribute.DeviceAttribute{}, false
	}
	return deviceattribute.DeviceAttribute{Name: deviceattribute.StandardDeviceAttributePCIBusID,
		Value: resourceapi.DeviceAttribute{StringValue: &id}}, true
}

// pciBDF is deviceattribute's own check of a PCI bus ID.
var pciBDF = regexp.MustCompile(`^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-9a-f]{1})$`)

// truncate keeps an attribute within the API's 64-character limit.
func truncate(v string) string {
	if len(v) <= maxAttrValLen {
		return v
	}
	return strings.TrimSpace(v[:maxAttrValLen])
}

// Summary describes what was published, for logs and the admin API.
func Summary(ps []Pool) string {
	var parts []string
	for _, p := range ps {
		parts = append(parts, fmt.Sprintf("%s=%d", p.Name, len(p.Devices)))
	}
	return strings.Join(parts, " ")
}

func has(attrs map[resourceapi.QualifiedName]resourceapi.DeviceAttribute, name resourceapi.QualifiedName) bool {
	_, ok := attrs[name]
	return ok
}
