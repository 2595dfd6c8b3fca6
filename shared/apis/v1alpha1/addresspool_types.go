package v1alpha1

// Limits of cluster address pools, enforced by the CRD and by
// ValidateClusterConfig.
const (
	MaxAddressPools         = 8
	MaxBlocksPerNode        = 16
	MaxAddressPoolBlocks    = 4096
	DefaultMaxBlocksPerNode = 4
)

// AddressPool is a cluster address pool: the operator carves its subnet
// into blocks of blockPrefixLength bits and gives each node it governs one
// block (more when the node's block runs low), recorded in the
// ClusterConfig's status. A node's blocks become a node-local pool of the
// same name in its NodeConfig (ipPools: the pool's subnet, a range over the
// node's blocks), so addresses are handed out on the node, without an API
// call, and no two nodes share one. The block holding the gateway is never
// handed out.
//
// +kubebuilder:validation:XValidation:rule="self.blockPrefixLength > cidr(self.subnet).prefixLength() && self.blockPrefixLength <= (cidr(self.subnet).ip().family() == 4 ? 32 : 128)",message="blockPrefixLength must be longer than the subnet's prefix and at most 32 (IPv4) or 128 (IPv6)",fieldPath=".blockPrefixLength"
// +kubebuilder:validation:XValidation:rule="!has(self.gateway) || cidr(self.subnet).containsIP(self.gateway)",message="gateway must be inside subnet",fieldPath=".gateway"
// +kubebuilder:validation:XValidation:rule="!has(self.exclude) || self.exclude.all(x, isIP(x) ? cidr(self.subnet).containsIP(x) : cidr(self.subnet).containsCIDR(x))",message="excluded addresses must be inside subnet",fieldPath=".exclude"
type AddressPool struct {
	// Name is what claim configs name in ipPools, as for a node-local
	// pool; it must not be the name of one of spec.spec.ipPools.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// Subnet is the whole pool in CIDR form, IPv4 or IPv6, without host
	// bits; the addresses get its prefix length on every node.
	//
	// +required
	// +kubebuilder:validation:MaxLength=43
	// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="subnet must be a CIDR without host bits (10.0.0.0/16)"
	Subnet string `json:"subnet"`

	// BlockPrefixLength is the prefix length of a node's block: 26 gives
	// IPv4 blocks of 64 addresses, 112 IPv6 blocks of 65536.
	//
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	BlockPrefixLength int32 `json:"blockPrefixLength"`

	// MinFreeAddresses defines "low": when dra reports fewer free
	// addresses than this in a node's blocks, the node gets one more
	// block (up to maxBlocksPerNode). Default: a quarter of a block (at
	// most 1024), at least 1.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	MinFreeAddresses *int32 `json:"minFreeAddresses,omitempty"`

	// MaxBlocksPerNode bounds the blocks one node holds.
	//
	// +optional
	// +kubebuilder:default=4
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxBlocksPerNode int32 `json:"maxBlocksPerNode,omitempty"`

	// Gateway is never handed out, and is the next hop of routes that name
	// none, on every node.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=39
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="gateway must be an IP address"
	Gateway string `json:"gateway,omitempty"`

	// Routes are added in the pod with the address.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Routes []IPPoolRoute `json:"routes,omitempty"`

	// Exclude lists addresses or CIDRs never handed out.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=43
	// +kubebuilder:validation:items:XValidation:rule="isIP(self) || isCIDR(self)",message="an excluded entry is an IP address or a CIDR"
	Exclude []string `json:"exclude,omitempty"`
}

// AddressPoolStatus records the blocks of one cluster address pool: the
// operator reads it back at every reconcile, so blocks survive restarts
// and leader changes.
type AddressPoolStatus struct {
	// Name is the pool's name.
	//
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Subnet and BlockPrefixLength are the spec's when the blocks were
	// carved.
	//
	// +required
	// +kubebuilder:validation:MaxLength=43
	Subnet string `json:"subnet"`
	// +required
	BlockPrefixLength int32 `json:"blockPrefixLength"`

	// Blocks are the blocks handed out, in address order.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=4096
	Blocks []AddressBlock `json:"blocks,omitempty"`
}

// AddressBlock is one node's block of a cluster address pool.
type AddressBlock struct {
	// CIDR is the block.
	//
	// +required
	// +kubebuilder:validation:MaxLength=43
	CIDR string `json:"cidr"`
	// Node holds it.
	//
	// +required
	// +kubebuilder:validation:MaxLength=253
	Node string `json:"node"`
	// Retained is set when the ClusterConfig no longer governs Node but
	// the Node still exists: the block stays out of use, since the node's
	// pods may still hold its addresses, until the Node is deleted (or is
	// governed again, and takes it up).
	//
	// +optional
	Retained bool `json:"retained,omitempty"`
}

// IPPoolUsage is dra's count of one node-local pool's addresses, as the
// state service holds them.
type IPPoolUsage struct {
	// Name is the pool's name.
	//
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// RangeStart and RangeEnd are the range counted (the operator trusts
	// the count only for the range it wrote).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=39
	RangeStart string `json:"rangeStart,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=39
	RangeEnd string `json:"rangeEnd,omitempty"`
	// Size, Used and Free are the addresses the range can hand out, in
	// use, and free. Size and Free are decimal strings: an IPv6 range can
	// hold more than 2^63.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=40
	Size string `json:"size,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	Used int32 `json:"used"`
	// +optional
	// +kubebuilder:validation:MaxLength=40
	Free string `json:"free,omitempty"`
}
