// Package v1alpha1 holds netdra's cluster configuration API, group
// netdra.io, version v1alpha1: NodeConfig, the configuration of the node
// whose name it carries, read by dra on that node; and ClusterConfig, a node
// selector plus a NodeConfig spec from which the operator generates one
// NodeConfig per selected node. Both are cluster-scoped.
//
// The Go types carry the OpenAPI validation, defaults, CEL rules and printer
// columns as kubebuilder markers; controller-gen turns them into the deep
// copy code beside them and the CRD manifests in the Helm chart's
// pods/chart/netdra/files/crds. Validate checks a spec in Go the way the
// CRDs do, and more (globs, reserved names), for dra to call on what it
// reads.
//
// +kubebuilder:object:generate=true
// +groupName=netdra.io
package v1alpha1
