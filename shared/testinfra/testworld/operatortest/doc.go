// Package operatortest runs netdra's operator and CRDs against a real
// Kubernetes control plane (package controlplane): the CRDs from
// pods/chart/netdra/files/crds are installed into a real apiserver, every
// operator rule is a scenario with the operator running in-process (and
// once as its own binary), and every kind of bad spec is rejected
// server-side. It lives in the testworld module so the product's go.mod
// stays lean; the product comes in through a replace directive.
//
// The scenarios share one control plane and run one at a time: each starts
// from a cluster without Nodes, NodeConfigs or ClusterConfigs and leaves it
// that way.
package operatortest
