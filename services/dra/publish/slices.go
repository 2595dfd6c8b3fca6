// Package publish turns the state service's tables into the driver's
// ResourceSlices: it follows the state service's Watch, assigns devices to
// pools by the pool rules, and hands the result to the kubelet plugin's
// publisher, coalescing a burst of changes into one publication.
package publish

import (
	"fmt"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/services/dra/pools"
)

// MaxDevicesPerSlice is the most devices one ResourceSlice holds.
const MaxDevicesPerSlice = 128

// Standard attributes of the DRA device model.
const (
	pciBusIDAttr  resourceapi.QualifiedName = "resource.kubernetes.io/pciBusID"
	pcieRootAttr  resourceapi.QualifiedName = "resource.kubernetes.io/pcieRoot"
	attrPool      resourceapi.QualifiedName = "pool"
	attrManager   resourceapi.QualifiedName = "deviceManager"
	attrIfName    resourceapi.QualifiedName = "ifName"
	attrKernel    resourceapi.QualifiedName = "kernelIfName"
	attrPFName    resourceapi.QualifiedName = "pfName"
	attrVFIndex   resourceapi.QualifiedName = "vfIndex"
	attrDriver    resourceapi.QualifiedName = "driver"
	attrVendor    resourceapi.QualifiedName = "vendor"
	attrDeviceID  resourceapi.QualifiedName = "deviceID"
	attrNUMANode  resourceapi.QualifiedName = "numaNode"
	attrMAC       resourceapi.QualifiedName = "macAddress"
	attrMTU       resourceapi.QualifiedName = "mtu"
	maxAttrValLen                           = 64
)

// Resources builds the driver's resources from the pools: every pool, even
// empty, in slices of at most MaxDevicesPerSlice devices.
func Resources(ps []pools.Pool) *resourceslice.DriverResources {
	out := &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{}}
	for _, p := range ps {
		var devices []resourceapi.Device
		for _, d := range p.Devices {
			devices = append(devices, Device(p.Name, d))
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

// Device is d as published in pool: the manager's attributes plus pool and
// deviceManager, and the standard PCI attributes where known.
func Device(pool string, d *devicev1.Device) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{}
	str := func(name resourceapi.QualifiedName, v string) {
		if v != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: ptr.To(truncate(v))}
		}
	}
	str(attrPool, pool)
	str(attrManager, pools.ManagerName(d.GetManager()))
	str(attrIfName, d.GetName())
	str(attrKernel, d.GetKernelIfName())
	str(attrPFName, d.GetPfName())
	str(attrDriver, d.GetDriver())
	str(attrVendor, d.GetVendorId())
	str(attrDeviceID, d.GetDeviceId())
	str(attrMAC, d.GetMacAddress())
	str(pciBusIDAttr, d.GetPciAddress())
	str(pcieRootAttr, d.GetPcieRoot())
	if d.VfIndex != nil {
		attrs[attrVFIndex] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetVfIndex()))}
	}
	if d.NumaNode != nil {
		attrs[attrNUMANode] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetNumaNode()))}
	}
	if d.GetMtu() != 0 {
		attrs[attrMTU] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.GetMtu()))}
	}
	for k, v := range d.GetAttributes() {
		if name := resourceapi.QualifiedName(k); !has(attrs, name) {
			str(name, v)
		}
	}
	return resourceapi.Device{Name: d.GetName(), Attributes: attrs}
}

// truncate keeps an attribute within the API's 64-character limit.
func truncate(v string) string {
	if len(v) <= maxAttrValLen {
		return v
	}
	return strings.TrimSpace(v[:maxAttrValLen])
}

// Summary describes what was published, for logs and the admin API.
func Summary(ps []pools.Pool) string {
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
