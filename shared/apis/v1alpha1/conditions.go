package v1alpha1

// NodeConfig condition types and reasons, written by dra.
const (
	// ConditionAccepted is True when the spec passed Validate, False
	// with ReasonInvalid and the error as message otherwise.
	ConditionAccepted = "Accepted"
	// ConditionApplied is True when the node runs the accepted spec,
	// False with ReasonApplyFailed or ReasonPending otherwise.
	ConditionApplied = "Applied"

	ReasonValid       = "Valid"
	ReasonInvalid     = "Invalid"
	ReasonApplied     = "Applied"
	ReasonApplyFailed = "ApplyFailed"
	ReasonPending     = "Pending"
	// ReasonDriverNameInUse: Applied is False because the spec changes
	// driverName while claims are prepared under the name in force.
	ReasonDriverNameInUse = "DriverNameInUse"

	// ConditionIPPoolsDraining is True, with ReasonIPPoolsDraining, while
	// address pools removed from the spec or shrunk still hold addresses
	// of live claims (they keep them until the claims are unprepared);
	// False, with ReasonIPPoolsSettled, otherwise. Absent without pools.
	ConditionIPPoolsDraining = "IPPoolsDraining"

	ReasonIPPoolsDraining = "AddressesInUse"
	ReasonIPPoolsSettled  = "Settled"

	// ConditionDeviceManagersSettled is True, with ReasonManagersSettled,
	// while every device manager does what the configuration in force
	// asks; False, with ReasonManagersWaiting and the provisioner's
	// warnings as message, while one does not (an SR-IOV PF whose vfCount
	// waits until its allocated VFs are freed, a manager that stopped).
	ConditionDeviceManagersSettled = "DeviceManagersSettled"

	ReasonManagersSettled = "AsConfigured"
	ReasonManagersWaiting = "Waiting"
)

// ClusterConfig condition types and reasons, written by the operator.
const (
	// ConditionConflicting is True, with ReasonConflict, while the
	// ClusterConfig selects a node an older ClusterConfig governs; it
	// then governs no node. It is False, with ReasonNoConflict, otherwise:
	// the operator keeps it on every ClusterConfig rather than removing it.
	ConditionConflicting = "netdra.io/ConflictingClusterConfiguration"
	// ConditionInvalidNodeSelector is True, with ReasonInvalidNodeSelector,
	// while the node selector cannot be parsed (it then selects no node);
	// the operator removes it once the selector parses.
	ConditionInvalidNodeSelector = "netdra.io/InvalidNodeSelector"

	// ConditionAddressPoolExhausted is True, with ReasonPoolExhausted and
	// a message naming the pools and the nodes left without a block, while
	// a node needs a block of a cluster address pool that has none free;
	// False, with ReasonBlocksAvailable, otherwise. Absent without address
	// pools.
	ConditionAddressPoolExhausted = "netdra.io/AddressPoolExhausted"

	// ConditionInvalidAddressPool is True, with ReasonInvalidAddressPool
	// and the error naming the field, while an address pool fails
	// ValidateClusterConfig: that pool hands out no block (the blocks it
	// recorded are kept). Removed once the pools are valid.
	ConditionInvalidAddressPool = "netdra.io/InvalidAddressPool"

	ReasonInvalidAddressPool = "InvalidAddressPool"
	ReasonPoolExhausted      = "PoolExhausted"
	ReasonBlocksAvailable    = "BlocksAvailable"

	ReasonConflict            = "ConfigurationConflict"
	ReasonNoConflict          = "NoConflict"
	ReasonInvalidNodeSelector = "InvalidNodeSelector"
)

// Labels on the NodeConfigs the operator generates. A NodeConfig without
// LabelManagedBy=ManagedByOperator is not the operator's, unless a
// ClusterConfig selects its node: then the operator takes it over.
const (
	LabelManagedBy    = "netdra.io/managed-by"
	ManagedByOperator = "operator"
	// LabelClusterConfig names the ClusterConfig a generated NodeConfig
	// mirrors.
	LabelClusterConfig = "netdra.io/cluster-config"
)
