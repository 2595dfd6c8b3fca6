// Package e2e holds netdra's end-to-end tests: the real node processes
// (state, provisioner, dra, nri) on a real node — a real kubelet and a real
// containerd with NRI, runc and containers (package realnode) — against the
// test world's control plane, on host veth devices in a throwaway network
// namespace that stands in for the node's. What a pod got is read from
// inside its container.
package e2e
