// Package e2e holds netdra's end-to-end tests: the real node processes
// (state, provisioner, dra, nri) against the test world's control plane,
// emulated kubelet and NRI runtime side, on host veth devices in throwaway
// network namespaces.
package e2e
