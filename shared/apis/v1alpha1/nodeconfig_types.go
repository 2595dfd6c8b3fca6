package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeConfig configures netdra on the node it is named after: the DRA
// driver name and registration, the pools devices are published in and the
// device managers. dra on that node watches it; the operator generates it
// from a ClusterConfig, or a user writes it by hand.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ndnc,categories=netdra
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driverName`
// +kubebuilder:printcolumn:name="Pools",type=integer,JSONPath=`.status.pools`,description="Pools dra publishes"
// +kubebuilder:printcolumn:name="Accepted",type=string,JSONPath=`.status.conditions[?(@.type=="Accepted")].status`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.conditions[?(@.type=="Applied")].status`
// +kubebuilder:printcolumn:name="ClusterConfig",type=string,priority=1,JSONPath=`.metadata.labels.netdra\.io/cluster-config`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type NodeConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec NodeConfigSpec `json:"spec,omitempty"`
	// +optional
	Status NodeConfigStatus `json:"status,omitempty"`
}

// NodeConfigList is a list of NodeConfigs.
//
// +kubebuilder:object:root=true
type NodeConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []NodeConfig `json:"items"`
}

// Defaults of the optional NodeConfigSpec fields; the CRD applies the same
// values, Default applies them in Go.
const (
	DefaultDriverName                   = "netdra.io"
	DefaultDRARegistrationRetryInterval = 1  // seconds
	DefaultDRARegistrationTimeout       = 5  // seconds
	DefaultDRARegistrationMaxAttempts   = 10 // attempts
)

// Limits of NodeConfigSpec values, enforced by the CRD and by Validate.
const (
	MaxRegistrationSeconds  = 3600
	MaxRegistrationAttempts = 1000
	MaxPools                = 32
	MaxPoolFilterIfNames    = 32
	MaxPoolNameLen          = 63
	MaxDriverNameLen        = 63
	MaxKernelIfNameLen      = 15 // IFNAMSIZ - 1
	MaxDeviceNameLen        = 63 // a ResourceSlice device name
	MaxVFCount              = 4096
	MaxDummyCount           = 1024
	MaxPathLen              = 256
)

// NodeConfigSpec is the configuration of one node: every field of the
// reference design's node config. The apiserver fills unset optional fields
// with their defaults (Default does the same in Go).
//
// +kubebuilder:validation:XValidation:rule="!has(self.pools) || self.pools.all(p, self.pools.all(q, p.name == q.name || !has(p.filter) || !has(q.filter) || !has(p.filter.ifNames) || !has(q.filter.ifNames) || !p.filter.ifNames.exists(n, n in q.filter.ifNames)))",message="an ifNames value may appear in at most one pool: it names a single device",fieldPath=".pools",reason=FieldValueInvalid
type NodeConfigSpec struct {
	// DriverName is the DRA driver name dra registers and publishes
	// ResourceSlices under: a DNS subdomain.
	//
	// +optional
	// +kubebuilder:default="netdra.io"
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="a driver name must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	DriverName string `json:"driverName,omitempty"`

	// DRARegistrationRetryInterval is the number of seconds between two
	// attempts to register with the kubelet.
	//
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	DRARegistrationRetryInterval *int32 `json:"draRegistrationRetryInterval,omitempty"`

	// DRARegistrationTimeout is the number of seconds one registration
	// attempt may take.
	//
	// +optional
	// +kubebuilder:default=5
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=3600
	DRARegistrationTimeout *int32 `json:"draRegistrationTimeout,omitempty"`

	// DRARegistrationMaxAttempts is how many registration attempts dra
	// makes before it gives up.
	//
	// +optional
	// +kubebuilder:default=10
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000
	DRARegistrationMaxAttempts *int32 `json:"draRegistrationMaxAttempts,omitempty"`

	// Pools group the node's devices: each pool is published with the
	// devices its filter matches. Names are unique.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Pools []Pool `json:"pools,omitempty"`

	// DeviceManagerConfigs configures the device managers; a manager that
	// is absent or not enabled does not run.
	//
	// +optional
	DeviceManagerConfigs *DeviceManagerConfigs `json:"deviceManagerConfigs,omitempty"`

	// IPPools are node-local address pools claims take addresses from
	// (claim config ipPools). Names are unique; ranges of one family do not
	// overlap.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	IPPools []IPPool `json:"ipPools,omitempty"`

	// SysfsRoot is where the host's sysfs is mounted for the provisioner
	// (/sys by default; /host/sys in a pod), an absolute path.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/`
	SysfsRoot string `json:"sysfsRoot,omitempty"`
}

// Pool is a named group of devices published together.
type Pool struct {
	// Name is the pool's name in the pool attribute (ResourceSlices say <node>/<name>):
	// a DNS subdomain of one segment (no '/').
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="!self.contains('/')",message="a pool name must not contain '/'"
	// +kubebuilder:validation:XValidation:rule="self.contains('/') || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="a pool name must be a DNS subdomain: lower-case letters, digits, '-' and '.', starting and ending with a letter or digit"
	Name string `json:"name"`

	// Filter selects the pool's devices. Set fields are ANDed; an empty
	// list matches any device; no filter matches every device.
	//
	// +optional
	Filter *PoolFilter `json:"filter,omitempty"`

	// KeepEBPFPrograms lets the pool's host interfaces keep the eBPF
	// programs the host attached to them (tcx, tc bpf filters, XDP) when
	// they go into a pod. By default they are handed off clean: the
	// programs are detached before the interface goes to the pod and
	// reattached when the claim is freed.
	//
	// +optional
	KeepEBPFPrograms bool `json:"keepEbpfPrograms,omitempty"`

	// UnhealthyTaintEffect is the effect of the taint (key
	// netdra.io/unhealthy) dra puts on a published device of the pool
	// whose link lost its carrier, or whose parent link is down or gone,
	// until it is healthy again: NoSchedule (the default: no new claim is
	// allocated it), NoExecute (pods using it are evicted too) or None (no
	// taint).
	//
	// +optional
	// +kubebuilder:validation:Enum=NoSchedule;NoExecute;None
	UnhealthyTaintEffect TaintEffect `json:"unhealthyTaintEffect,omitempty"`

	// MultusResourceName, when set, has dra publish on each of the pool's
	// devices the two attributes Multus's DRA integration reads from a
	// ResourceSlice: k8s.cni.cncf.io/resourceName, this value, which must
	// equal the k8s.v1.cni.cncf.io/resourceName annotation of the
	// NetworkAttachmentDefinitions whose pods use the pool (the SR-IOV
	// device plugin's resource name, intel.com/sriov_vf), and
	// k8s.cni.cncf.io/deviceID, the ID Multus hands the NAD's CNI plugin:
	// the device's PCI address, or for a device without one its kernel
	// interface name, else its device name. A qualified name (an optional DNS-subdomain prefix and '/',
	// then a name of letters, digits, '-', '_' and '.'), at most 64
	// characters.
	//
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`
	MultusResourceName string `json:"multusResourceName,omitempty"`

	// IPPools names the address pools (of spec.ipPools, or cluster
	// address pools, which reach the node under the same names) that the
	// claims for this pool's devices take their addresses from. While one
	// of them has no free address, dra taints every device of the pool
	// netdra.io/ip-pool-exhausted=<pool name>:NoSchedule, so that the
	// scheduler places new claims on a node that can address them instead
	// of on one whose prepare would fail; the taint goes when an address
	// is free again. A name no pool of the node has is never exhausted.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`
	IPPools []string `json:"ipPools,omitempty"`
}

// MaxMultusResourceNameLen is the longest MultusResourceName: a
// ResourceSlice string attribute's limit.
const MaxMultusResourceNameLen = 64

// TaintEffect is the effect of a device taint, or None for no taint.
type TaintEffect string

// The taint effects of UnhealthyTaintEffect.
const (
	TaintEffectNoSchedule TaintEffect = "NoSchedule"
	TaintEffectNoExecute  TaintEffect = "NoExecute"
	TaintEffectNone       TaintEffect = "None"
)

// DeviceManager names a device manager, as published in the deviceManager
// attribute.
//
// +kubebuilder:validation:Enum=sr-iov;dummy;host;subif
type DeviceManager string

// The device managers.
const (
	DeviceManagerSRIOV DeviceManager = "sr-iov"
	DeviceManagerDummy DeviceManager = "dummy"
	DeviceManagerHost  DeviceManager = "host"
	DeviceManagerSubif DeviceManager = "subif"
)

// DeviceManagers lists every DeviceManager, in the order of the enum.
var DeviceManagers = []DeviceManager{DeviceManagerSRIOV, DeviceManagerDummy, DeviceManagerHost, DeviceManagerSubif}

// PoolFilter selects devices by what their manager reports. A device
// matches when it matches every set field; a field matches when the
// device's value is in its list.
type PoolFilter struct {
	// DeviceManagers are the managers whose devices match.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=4
	DeviceManagers []DeviceManager `json:"deviceManagers,omitempty"`

	// PFNames are kernel names of SR-IOV physical functions whose VFs
	// match.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[^/:\s]+$`
	PFNames []string `json:"pfNames,omitempty"`

	// PCIAddrs are PCI addresses (0000:03:00.1).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=16
	// +kubebuilder:validation:items:Pattern=`^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$`
	PCIAddrs []string `json:"pciAddrs,omitempty"`

	// VendorIDs are PCI vendor IDs as sysfs prints them (0x8086).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=6
	// +kubebuilder:validation:items:Pattern=`^0x[0-9a-fA-F]{4}$`
	VendorIDs []string `json:"vendorIDs,omitempty"`

	// DeviceIDs are PCI device IDs as sysfs prints them (0x1889).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=6
	// +kubebuilder:validation:items:Pattern=`^0x[0-9a-fA-F]{4}$`
	DeviceIDs []string `json:"deviceIDs,omitempty"`

	// Drivers are kernel driver names (iavf, mlx5_core, vfio-pci).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[^/\s]+$`
	Drivers []string `json:"drivers,omitempty"`

	// IfNames are device names (the published name: 0000-03-00-1 for a
	// VF, dummy0, a host interface's name). Each names one device, so a
	// value may appear in one pool only.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[^/\s]+$`
	IfNames []string `json:"ifNames,omitempty"`

	// ParentIfNames are kernel names of the interfaces the devices hang
	// off (a VF's PF, a sub-interface's parent).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=15
	// +kubebuilder:validation:items:Pattern=`^[^/:\s]+$`
	ParentIfNames []string `json:"parentIfNames,omitempty"`
}

// DeviceManagerConfigs configures each device manager.
type DeviceManagerConfigs struct {
	// +optional
	SRIOV *SRIOVConfig `json:"sriov,omitempty"`
	// +optional
	Dummy *DummyConfig `json:"dummy,omitempty"`
	// +optional
	Host *HostConfig `json:"host,omitempty"`
	// +optional
	Subif *SubifConfig `json:"subif,omitempty"`
}

// SRIOVConfig configures the sr-iov manager, which publishes the node's
// SR-IOV virtual functions.
type SRIOVConfig struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// SysBusPCIDevPath is where PCI devices are listed
	// (<sysfsRoot>/bus/pci/devices by default), an absolute path.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^/`
	SysBusPCIDevPath string `json:"sysBusPCIDevPath,omitempty"`

	// Ifaces are the physical functions to create VFs on, one entry per
	// PF.
	//
	// +optional
	// +listType=map
	// +listMapKey=ifName
	// +kubebuilder:validation:MaxItems=64
	Ifaces []SRIOVIface `json:"ifaces,omitempty"`
}

// SRIOVIface asks for VFs on one physical function.
type SRIOVIface struct {
	// IfName is the PF's kernel interface name.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[^/:\s]+$`
	IfName string `json:"ifName"`

	// VFCount is how many VFs the PF has (its sriov_numvfs). A PF with
	// another non-zero count has its VFs re-created, which destroys them
	// all: only while none of them is allocated to a claim; until then it
	// keeps them, and the DeviceManagersSettled condition says that the
	// count waits. More than the PF's sriov_totalvfs is refused (the
	// Applied condition names the field). 0 leaves the PF's VFs as they
	// are.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4096
	VFCount int32 `json:"vfCount,omitempty"`
}

// DummyConfig configures the dummy manager, which publishes dummy0 to
// dummy<count-1>.
type DummyConfig struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Count is the number of dummy devices.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Count int32 `json:"count,omitempty"`
}

// HostConfig configures the host manager, which hands whole host
// interfaces to pods. Set fields are ANDed; an enabled host manager needs
// at least one, and an interface holding a default route is never offered.
//
// +kubebuilder:validation:XValidation:rule="!has(self.enabled) || !self.enabled || (has(self.ifNames) && size(self.ifNames) > 0) || (has(self.drivers) && size(self.drivers) > 0) || (has(self.vendorIDs) && size(self.vendorIDs) > 0) || (has(self.deviceIDs) && size(self.deviceIDs) > 0)",message="an enabled host manager needs ifNames, drivers, vendorIDs or deviceIDs: it never offers every interface"
type HostConfig struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// IfNames are interface names or shell globs (eth*).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[^/\s]+$`
	IfNames []string `json:"ifNames,omitempty"`

	// Drivers are kernel driver names.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=64
	// +kubebuilder:validation:items:Pattern=`^[^/\s]+$`
	Drivers []string `json:"drivers,omitempty"`

	// VendorIDs are PCI vendor IDs (0x8086).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=6
	// +kubebuilder:validation:items:Pattern=`^0x[0-9a-fA-F]{4}$`
	VendorIDs []string `json:"vendorIDs,omitempty"`

	// DeviceIDs are PCI device IDs (0x1889).
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=6
	// +kubebuilder:validation:items:Pattern=`^0x[0-9a-fA-F]{4}$`
	DeviceIDs []string `json:"deviceIDs,omitempty"`
}

// NodeConfigStatus is what dra reports about the NodeConfig it read. The
// operator never writes it.
type NodeConfigStatus struct {
	// ObservedGeneration is the generation dra last acted on.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Pools is the number of pools dra publishes for the node.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	Pools int32 `json:"pools,omitempty"`

	// PublishedPools are the pools dra last published for the node, with
	// the number of devices in each.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	PublishedPools []PoolStatus `json:"publishedPools,omitempty"`

	// IPPools count the addresses of each node-local pool (those of a
	// cluster address pool included): the operator adds a block when a
	// cluster pool's free addresses run low.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	IPPools []IPPoolUsage `json:"ipPools,omitempty"`

	// DriverName is the DRA driver name dra is registered under; it
	// differs from the spec's while a change of it is refused (see the
	// Applied condition).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=63
	DriverName string `json:"driverName,omitempty"`

	// Conditions are Accepted (the spec is valid), Applied (the node runs
	// it), IPPoolsDraining and DeviceManagersSettled (a device manager
	// that does not do all the spec asks, and why).
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PoolStatus is one published pool.
type PoolStatus struct {
	// Name is the pool's name.
	//
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Devices is the number of devices the pool publishes.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	Devices int32 `json:"devices"`
}
