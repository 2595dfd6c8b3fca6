package v1alpha1

// Limits of the subif manager's configuration, enforced by the CRD and by
// Validate.
const (
	MaxSubifParents   = 64
	MaxSubifCount     = 1024
	MaxSubifPrefixLen = 58 // a device name is <name>-<index>, at most 63
	MaxVLANID         = 4094
)

// SubifKind is the kind of link a sub-interface is.
//
// +kubebuilder:validation:Enum=macvlan;ipvlan;vlan
type SubifKind string

// The kinds of sub-interface.
const (
	SubifMacvlan SubifKind = "macvlan"
	SubifIPvlan  SubifKind = "ipvlan"
	SubifVLAN    SubifKind = "vlan"
)

// SubifModes are the modes each kind takes, the default first; a VLAN
// link has none.
var SubifModes = map[SubifKind][]string{
	SubifMacvlan: {"bridge", "private", "vepa", "passthru"},
	SubifIPvlan:  {"l2", "l3", "l3s"},
	SubifVLAN:    nil,
}

// SubifConfig configures the subif manager, which offers sub-interfaces
// (macvlan, ipvlan, 802.1Q VLAN links) of host interfaces. A sub-interface
// is created directly inside the pod's network namespace when the pod
// starts and deleted there when it stops: no link ever moves, the parent
// least of all. On one parent, the kernel takes macvlans or ipvlans, not
// both; its ipvlans share one mode; a passthru macvlan is its only one.
//
// +kubebuilder:validation:XValidation:rule="!has(self.parents) || self.parents.all(p, self.parents.all(q, p.parentIfName != q.parentIfName || p.kind == 'vlan' || q.kind == 'vlan' || p.kind == q.kind))",message="a parent takes macvlans or ipvlans, not both",fieldPath=".parents",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.parents) || self.parents.all(p, self.parents.all(q, p.parentIfName != q.parentIfName || p.kind != 'ipvlan' || q.kind != 'ipvlan' || (has(p.mode) ? p.mode : 'l2') == (has(q.mode) ? q.mode : 'l2')))",message="every ipvlan of a parent has the same mode",fieldPath=".parents",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.parents) || self.parents.all(p, self.parents.all(q, p.name == q.name || p.parentIfName != q.parentIfName || p.kind != 'macvlan' || q.kind != 'macvlan' || !has(p.mode) || p.mode != 'passthru'))",message="a passthru macvlan is its parent's only macvlan",fieldPath=".parents",reason=FieldValueInvalid
type SubifConfig struct {
	// +optional
	Enabled bool `json:"enabled,omitempty"`

	// Parents are the offers, one per name: count sub-interfaces of one
	// kind on one parent interface. A parent may appear in several
	// entries (a macvlan offer and a VLAN offer of eth1, say).
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Parents []SubifParent `json:"parents,omitempty"`
}

// SubifParent offers count sub-interfaces of one kind on one parent
// interface, published as devices <name>-0 .. <name>-<count-1>.
//
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || (self.kind == 'macvlan' && self.mode in ['bridge', 'private', 'vepa', 'passthru']) || (self.kind == 'ipvlan' && self.mode in ['l2', 'l3', 'l3s'])",message="mode: a macvlan takes bridge, private, vepa or passthru, an ipvlan l2, l3 or l3s, a vlan none",fieldPath=".mode",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.vlanId) || self.kind == 'vlan'",message="vlanId: only a vlan sub-interface has a VLAN ID",fieldPath=".vlanId",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'passthru' || !has(self.count) || self.count <= 1",message="count: a passthru macvlan is the only macvlan of its parent: count 1 at most",fieldPath=".count",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || !has(self.count) || self.count == 0",message="count: a parent shared by capacity is one device, its count 0",fieldPath=".count",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || (self.kind != 'vlan' && (!has(self.mode) || self.mode != 'passthru'))",message="capacity: only macvlans (not passthru) and ipvlans share a parent by bandwidth",fieldPath=".capacity",reason=FieldValueInvalid
// +kubebuilder:validation:XValidation:rule="!has(self.capacity) || !self.name.matches('-[0-9]+$')",message="name: a shared parent's device is named after its entry, which may not end in -<digits> as a counted entry's devices do",fieldPath=".name",reason=FieldValueInvalid
type SubifParent struct {
	// Name prefixes the devices' names: a DNS label of at most 58
	// characters.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=58
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// ParentIfName is the parent's kernel interface name. The parent is
	// never moved; one holding a default route of the host is not
	// offered unless allowDefaultRoute is set.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9._-]+$`
	// +kubebuilder:validation:XValidation:rule="!(self in ['.', '..', 'lo'])",message="'.', '..' and 'lo' cannot be parents"
	ParentIfName string `json:"parentIfName"`

	// Kind is macvlan, ipvlan or vlan.
	//
	// +required
	Kind SubifKind `json:"kind"`

	// Mode is a macvlan's (bridge, the default; private, vepa, passthru)
	// or an ipvlan's (l2, the default; l3, l3s); a vlan has none.
	//
	// +optional
	// +kubebuilder:validation:Enum=bridge;private;vepa;passthru;l2;l3;l3s
	Mode string `json:"mode,omitempty"`

	// Count is how many sub-interfaces the parent offers.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1024
	Count int32 `json:"count,omitempty"`

	// VLANID is a vlan sub-interface's VLAN ID, the same for every device
	// of the entry; unset, each claim names its own (config vlan).
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4094
	VLANID int32 `json:"vlanId,omitempty"`

	// AllowDefaultRoute offers sub-interfaces of a parent that holds a
	// default route of the host (the node's uplink). Off by default.
	//
	// +optional
	AllowDefaultRoute bool `json:"allowDefaultRoute,omitempty"`

	// Capacity shares the parent by bandwidth instead of a count: it is
	// published as one device that many claims are allocated at once
	// (allowMultipleAllocations), the scheduler placing each by the
	// bandwidth it requests (capacity.requests.bandwidth in the claim),
	// and each claim's sub-interface is held to its share on egress.
	// macvlan (not passthru) and ipvlan only; count must then be 0.
	//
	// +optional
	Capacity *SubifCapacity `json:"capacity,omitempty"`
}

// Limits of a shared parent's bandwidth, in bits per second.
const (
	MinSubifBandwidth = 1_000_000          // 1M: a share below is refused
	MaxSubifBandwidth = 10_000_000_000_000 // 10T
)

// SubifCapacity is a shared parent's capacity: its bandwidth in bits per
// second and the share of a claim that requests none, each a decimal
// quantity ("10G" is 10 Gbit/s, "500M" 500 Mbit/s). A claim's share is at
// least 1M (1 Mbit/s).
//
// +kubebuilder:validation:XValidation:rule="!has(self.defaultRequest) || quantity(self.defaultRequest).compareTo(quantity(self.bandwidth)) <= 0",message="defaultRequest: larger than bandwidth",fieldPath=".defaultRequest",reason=FieldValueInvalid
type SubifCapacity struct {
	// Bandwidth is the parent's, in bits per second, from 1M to 10T: a
	// whole number with an optional k, M, G or T ("10G").
	//
	// +required
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+[kMGT]?$`
	// +kubebuilder:validation:XValidation:rule="quantity(self).compareTo(quantity('1M')) >= 0 && quantity(self).compareTo(quantity('10T')) <= 0",message="must be from 1M to 10T (bits per second)"
	Bandwidth string `json:"bandwidth"`

	// DefaultRequest is the share of a claim that requests no bandwidth,
	// from 1M to bandwidth, written as bandwidth is; unset, the whole
	// bandwidth (the claim holds the parent alone).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=16
	// +kubebuilder:validation:Pattern=`^[0-9]+[kMGT]?$`
	// +kubebuilder:validation:XValidation:rule="quantity(self).compareTo(quantity('1M')) >= 0",message="must be at least 1M (bits per second)"
	DefaultRequest string `json:"defaultRequest,omitempty"`
}
