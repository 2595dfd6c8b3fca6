package driver

import (
	"strconv"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
	"github.com/netdra/netdra/shared/managername"
)

// Device metadata (KEP-5304): what a workload reads of its devices from
// the file the kubelet plugin helper bind-mounts into its containers
// (/var/run/kubernetes.io/dra-device-attributes/<claim>/<request>/metadata.json):
// each device's attributes and its network data, as the claim status
// has them. Attribute names without a domain are the driver's.

// pciBusIDAttribute is the standard attribute of a PCI function's address.
const pciBusIDAttribute = "resource.kubernetes.io/pciBusID"

// deviceMetadata is the metadata of a device prepared as pd with cfg: its
// PCI address, interface names, MAC, VLAN, vfio device nodes, and the
// network data of its status entry (interface name, MAC, addresses).
func deviceMetadata(pd *devicev1.PreparedDevice, cfg *devicev1.DeviceConfig) *kubeletplugin.DeviceMetadata {
	dev := pd.GetDevice()
	attrs := map[string]resourceapi.DeviceAttribute{}
	str := func(name, v string) {
		if v != "" {
			attrs[name] = resourceapi.DeviceAttribute{StringValue: &v}
		}
	}
	str(pciBusIDAttribute, dev.GetPciAddress())
	str("deviceManager", managername.Of(dev.GetManager()))
	str("kernelIfName", dev.GetKernelIfName())
	str("pfName", dev.GetPfName())
	str("driver", dev.GetDriver())
	if dev.VfIndex != nil {
		attrs["vfIndex"] = resourceapi.DeviceAttribute{IntValue: new(int64(dev.GetVfIndex()))}
	}
	if cfg.Vlan != nil {
		attrs["vlan"] = resourceapi.DeviceAttribute{IntValue: new(int64(cfg.GetVlan()))}
	}
	for i, n := range pd.GetDeviceNodes() {
		str("deviceNode"+strconv.Itoa(i), n.GetPath())
	}
	nd := networkData(pd, cfg)
	if nd != nil {
		str("ifName", nd.InterfaceName)
		str("macAddress", nd.HardwareAddress)
	}
	return &kubeletplugin.DeviceMetadata{Attributes: attrs, NetworkData: nd}
}
