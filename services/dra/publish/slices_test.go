package publish

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/utils/ptr"

	devicev1 "github.com/netdra/netdra/protos/netdra/device/v1"
)

type attrs = map[resourceapi.QualifiedName]resourceapi.DeviceAttribute

func strAttr(v string) resourceapi.DeviceAttribute {
	return resourceapi.DeviceAttribute{StringValue: &v}
}
func intAttr(v int64) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{IntValue: &v} }

// TestDevice_Attributes: a PCI function (a VF, a host NIC) publishes the
// standard resource.kubernetes.io/pciBusID, pcieRoot and numaNode beside
// the driver's own (numaNode too, deprecated); a device with no PCI
// function (a dummy, a veth) publishes none of them. The devices are as the
// provisioner's managers discover them from their fake sysfs trees.
func TestDevice_Attributes(t *testing.T) {
	for _, tc := range deviceAttributesCases {
		t.Run(tc.name, tc.run)
	}
}

// deviceAttributesCase is one case of TestDevice_Attributes: the
// attributes Device publishes of dev in pool.
type deviceAttributesCase struct {
	name string
	pool string
	dev  *devicev1.Device
	want attrs
}

// deviceAttributesCases are TestDevice_Attributes's cases.
var deviceAttributesCases = []deviceAttributesCase{
	{name: "SR-IOV VF", pool: "vfs", dev: &devicev1.Device{Name: "0000-03-02-0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		KernelIfName: "ens1f0v0", PciAddress: "0000:03:02.0", PfName: "ens1f0", VfIndex: ptr.To[int32](0), VendorId: "0x8086",
		DeviceId: "0x154c", Driver: "iavf", NumaNode: ptr.To[int32](1), PcieRoot: "pci0000:00", MacAddress: "02:00:00:03:02:00", Mtu: 1500},
		want: attrs{"pool": strAttr("vfs"), "deviceManager": strAttr("sr-iov"), "ifName": strAttr("0000-03-02-0"),
			"kernelIfName": strAttr("ens1f0v0"), "pfName": strAttr("ens1f0"), "vfIndex": intAttr(0), "driver": strAttr("iavf"),
			"vendor": strAttr("0x8086"), "deviceID": strAttr("0x154c"), "macAddress": strAttr("02:00:00:03:02:00"), "mtu": intAttr(1500),
			"numaNode":                        intAttr(1),
			"resource.kubernetes.io/pciBusID": strAttr("0000:03:02.0"),
			"resource.kubernetes.io/pcieRoot": strAttr("pci0000:00"),
			"resource.kubernetes.io/numaNode": intAttr(1)}},
	{name: "VF on vfio-pci with no NUMA affinity", pool: "vfs", dev: &devicev1.Device{Name: "0000-5e-00-3", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		PciAddress: "0000:5e:00.3", PfName: "ens2f0np0", VfIndex: ptr.To[int32](1), VendorId: "0x15b3", DeviceId: "0x1018", Driver: "vfio-pci", PcieRoot: "pci0000:5d"},
		want: attrs{"pool": strAttr("vfs"), "deviceManager": strAttr("sr-iov"), "ifName": strAttr("0000-5e-00-3"),
			"pfName": strAttr("ens2f0np0"), "vfIndex": intAttr(1), "driver": strAttr("vfio-pci"), "vendor": strAttr("0x15b3"), "deviceID": strAttr("0x1018"),
			"resource.kubernetes.io/pciBusID": strAttr("0000:5e:00.3"),
			"resource.kubernetes.io/pcieRoot": strAttr("pci0000:5d")}},
	{name: "host NIC behind a bridge, NUMA node 0", pool: "nics", dev: &devicev1.Device{Name: "ens5", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		KernelIfName: "ens5", PciAddress: "0000:01:00.0", VendorId: "0x15b3", DeviceId: "0x1017", Driver: "mlx5_core",
		NumaNode: ptr.To[int32](0), PcieRoot: "pci0000:00", MacAddress: "b8:59:9f:00:00:05", Mtu: 9000},
		want: attrs{"pool": strAttr("nics"), "deviceManager": strAttr("host"), "ifName": strAttr("ens5"), "kernelIfName": strAttr("ens5"),
			"driver": strAttr("mlx5_core"), "vendor": strAttr("0x15b3"), "deviceID": strAttr("0x1017"),
			"macAddress": strAttr("b8:59:9f:00:00:05"), "mtu": intAttr(9000),
			"numaNode":                        intAttr(0),
			"resource.kubernetes.io/pciBusID": strAttr("0000:01:00.0"),
			"resource.kubernetes.io/pcieRoot": strAttr("pci0000:00"),
			"resource.kubernetes.io/numaNode": intAttr(0)}},
	{name: "VF with an RDMA device", pool: "vfs", dev: &devicev1.Device{Name: "0000-5e-00-2", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV,
		KernelIfName: "ens2f0v0", PciAddress: "0000:5e:00.2", Driver: "mlx5_core", RdmaDevice: "mlx5_2"},
		want: attrs{"pool": strAttr("vfs"), "deviceManager": strAttr("sr-iov"), "ifName": strAttr("0000-5e-00-2"),
			"kernelIfName": strAttr("ens2f0v0"), "driver": strAttr("mlx5_core"), "rdma": {BoolValue: ptr.To(true)}, "rdmaDevice": strAttr("mlx5_2"),
			"resource.kubernetes.io/pciBusID": strAttr("0000:5e:00.2")}},
	{name: "host veth with soft-RoCE", pool: "nics", dev: &devicev1.Device{Name: "veth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		KernelIfName: "veth1", Driver: "veth", RdmaDevice: "rxe0"},
		want: attrs{"pool": strAttr("nics"), "deviceManager": strAttr("host"), "ifName": strAttr("veth1"), "kernelIfName": strAttr("veth1"),
			"driver": strAttr("veth"), "rdma": {BoolValue: ptr.To(true)}, "rdmaDevice": strAttr("rxe0")}},
	{name: "host veth", pool: "nics", dev: &devicev1.Device{Name: "veth0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		KernelIfName: "veth0", Driver: "veth", MacAddress: "02:00:00:00:00:04", Mtu: 1500},
		want: attrs{"pool": strAttr("nics"), "deviceManager": strAttr("host"), "ifName": strAttr("veth0"), "kernelIfName": strAttr("veth0"),
			"driver": strAttr("veth"), "macAddress": strAttr("02:00:00:00:00:04"), "mtu": intAttr(1500)}},
	{name: "macvlan sub-interface", pool: "mv", dev: &devicev1.Device{Name: "mv-3", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF,
		KernelIfName: "mv-3", Driver: "macvlan", Mtu: 9000, SubInterface: &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_MACVLAN,
			Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_PRIVATE, ParentIfName: "eth1"}},
		want: attrs{"pool": strAttr("mv"), "deviceManager": strAttr("subif"), "ifName": strAttr("mv-3"), "kernelIfName": strAttr("mv-3"),
			"driver": strAttr("macvlan"), "mtu": intAttr(9000), "parentIfName": strAttr("eth1"), "mode": strAttr("private")}},
	{name: "vlan sub-interface", pool: "v100", dev: &devicev1.Device{Name: "v100-0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_SUBIF,
		KernelIfName: "v100-0", Driver: "vlan", SubInterface: &devicev1.SubInterface{Kind: devicev1.SubInterfaceKind_SUB_INTERFACE_KIND_VLAN,
			ParentIfName: "eth2", VlanId: 100}},
		want: attrs{"pool": strAttr("v100"), "deviceManager": strAttr("subif"), "ifName": strAttr("v100-0"), "kernelIfName": strAttr("v100-0"),
			"driver": strAttr("vlan"), "parentIfName": strAttr("eth2"), "vlanId": intAttr(100)}},
	{name: "dummy", pool: "dummies", dev: &devicev1.Device{Name: "dummy0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_DUMMY},
		want: attrs{"pool": strAttr("dummies"), "deviceManager": strAttr("dummy"), "ifName": strAttr("dummy0")}},
	{name: "NUMA node out of the standard's range: only the driver's own", pool: "nics", dev: &devicev1.Device{Name: "eth0", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		PciAddress: "0000:03:00.0", NumaNode: ptr.To[int32](4096), PcieRoot: "pci0000:00"},
		want: attrs{"pool": strAttr("nics"), "deviceManager": strAttr("host"), "ifName": strAttr("eth0"), "numaNode": intAttr(4096),
			"resource.kubernetes.io/pciBusID": strAttr("0000:03:00.0"),
			"resource.kubernetes.io/pcieRoot": strAttr("pci0000:00")}},
	{name: "not a PCI address: no standard attribute", pool: "nics", dev: &devicev1.Device{Name: "eth1", Manager: devicev1.DeviceManager_DEVICE_MANAGER_HOST,
		PciAddress: "03:00.0", NumaNode: ptr.To[int32](1), PcieRoot: "pci0000:00"},
		want: attrs{"pool": strAttr("nics"), "deviceManager": strAttr("host"), "ifName": strAttr("eth1"), "numaNode": intAttr(1)}},
}

// run checks the attributes of the case's device.
func (tc deviceAttributesCase) run(t *testing.T) {
	got := Device(tc.pool, tc.dev)
	if diff := cmp.Diff(tc.want, attrs(got.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
}

// pciBusIDAttribute is deviceattribute.GetPCIBusIDAttribute, without its
// regular expression compiled at every call.
func TestPCIBusIDAttribute_IsTheLibrarys(t *testing.T) {
	for _, id := range []string{"0000:03:00.1", "abcd:ef:1f.7", "", "0000:03:00.10", "0000:03:00", "0000:3:00.1",
		"0000:03:00.g", "ABCD:EF:1F.7", " 0000:03:00.1", "0000:03:00.1\n", "00000:03:00.1", "0000-03-00-1"} {
		want, werr := deviceattribute.GetPCIBusIDAttribute(id)
		got, ok := pciBusIDAttribute(id)
		if ok != (werr == nil) {
			t.Fatalf("%q: accepted %v, the library's error %v", id, ok, werr)
		}
		if ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: %+v, the library's %+v", id, got, want)
		}
	}
}

func BenchmarkPCIBusIDAttribute(b *testing.B) {
	b.Run("netdra", func(b *testing.B) {
		for b.Loop() {
			pciBusIDAttribute("0000:03:00.1")
		}
	})
	b.Run("deviceattribute", func(b *testing.B) {
		for b.Loop() {
			_, _ = deviceattribute.GetPCIBusIDAttribute("0000:03:00.1")
		}
	})
}

// BenchmarkDevice builds one VF's published form, what every publication
// does for each device of the node.
func BenchmarkDevice(b *testing.B) {
	d := &devicev1.Device{Name: "enp3s0f0v7", KernelIfName: "enp3s0f0v7", PfName: "enp3s0f0", VfIndex: ptr.To[int32](7),
		Driver: "iavf", VendorId: "8086", DeviceId: "154c", MacAddress: "02:00:00:00:00:07", Mtu: 1500,
		NumaNode: ptr.To[int32](0), PciAddress: "0000:03:02.7", PcieRoot: "pci0000:00",
		Manager: devicev1.DeviceManager_DEVICE_MANAGER_SRIOV}
	for b.Loop() {
		Device("vf", d)
	}
}

// TestDevice_MaxAttributes: a device with every field netdra publishes
// set gets no more attributes than maxAttributes, the size Device makes
// its map with.
func TestDevice_MaxAttributes(t *testing.T) {
	d := &devicev1.Device{Name: "enp3s0f0v7", KernelIfName: "enp3s0f0v7", PfName: "enp3s0f0", VfIndex: ptr.To[int32](7),
		Driver: "iavf", VendorId: "8086", DeviceId: "154c", MacAddress: "02:00:00:00:00:07", Mtu: 1500,
		NumaNode: ptr.To[int32](0), PciAddress: "0000:03:02.7", PcieRoot: "pci0000:00", RdmaDevice: "mlx5_3",
		SubInterface: &devicev1.SubInterface{ParentIfName: "enp3s0f0", Mode: devicev1.SubInterfaceMode_SUB_INTERFACE_MODE_MACVLAN_BRIDGE, VlanId: 7},
		Manager:      devicev1.DeviceManager_DEVICE_MANAGER_SRIOV}
	got := Device("vf", d).Attributes
	maps.Copy(got, MultusAttributes("intel.com/sriov", d))
	if len(got) != maxAttributes {
		t.Fatalf("a device with every field has %d attributes, maxAttributes is %d: %v", len(got), maxAttributes, slices.Sorted(maps.Keys(got)))
	}
}
