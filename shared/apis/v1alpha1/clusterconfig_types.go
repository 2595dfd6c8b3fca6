package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ClusterConfig configures netdra on a group of nodes: the operator writes
// its spec.spec, verbatim, into a NodeConfig named after each node its
// nodeSelector selects, with the node's blocks of its address pools added
// to ipPools. A node is governed by one ClusterConfig at most:
// the oldest (creationTimestamp, then name) selecting it. A ClusterConfig
// that selects a node another one governs is conflicting and governs none
// of its nodes.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=ndcc,categories=netdra
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`,description="Nodes this ClusterConfig governs"
// +kubebuilder:printcolumn:name="Conflicting",type=string,JSONPath=`.status.conditions[?(@.type=="netdra.io/ConflictingClusterConfiguration")].status`
// +kubebuilder:printcolumn:name="Driver",type=string,priority=1,JSONPath=`.spec.spec.driverName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="a ClusterConfig name is at most 63 characters: it is the value of the netdra.io/cluster-config label on the NodeConfigs it generates"
type ClusterConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec ClusterConfigSpec `json:"spec,omitempty"`
	// +optional
	Status ClusterConfigStatus `json:"status,omitempty"`
}

// ClusterConfigList is a list of ClusterConfigs.
//
// +kubebuilder:object:root=true
type ClusterConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterConfig `json:"items"`
}

// ClusterConfigSpec selects nodes and says what to configure on them.
//
// +kubebuilder:validation:XValidation:rule="!has(self.addressPools) || !has(self.spec) || !has(self.spec.ipPools) || !self.addressPools.exists(a, self.spec.ipPools.exists(p, p.name == a.name))",message="an address pool's name must differ from the names of spec.ipPools",fieldPath=".addressPools"
type ClusterConfigSpec struct {
	// NodeSelector selects the nodes by their labels; absent or empty, it
	// selects every node.
	//
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Spec is the NodeConfig spec of every selected node.
	//
	// +optional
	// +kubebuilder:default={}
	Spec NodeConfigSpec `json:"spec,omitempty"`

	// AddressPools are cluster address pools: each is carved into per-node
	// blocks, and a node's blocks become a node-local pool of the same
	// name in its NodeConfig's ipPools. Names are unique, and differ from
	// those of spec.ipPools.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	AddressPools []AddressPool `json:"addressPools,omitempty"`
}

// ClusterConfigStatus is what the operator reports about a ClusterConfig.
type ClusterConfigStatus struct {
	// ObservedGeneration is the generation the operator last acted on.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Nodes is the number of nodes this ClusterConfig governs: those it
	// selects, or 0 while it is conflicting.
	//
	// +optional
	Nodes int32 `json:"nodes"`

	// AddressPools record the blocks of each cluster address pool and the
	// node holding each.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=8
	AddressPools []AddressPoolStatus `json:"addressPools,omitempty"`

	// Conditions always hold netdra.io/ConflictingClusterConfiguration
	// (True while the ClusterConfig is conflicting, False otherwise), and
	// netdra.io/InvalidNodeSelector while the selector cannot be parsed,
	// and netdra.io/AddressPoolExhausted while it has address pools.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}
