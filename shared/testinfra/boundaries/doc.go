// Package boundaries holds the test that enforces netdra's import rules:
// only the provisioner touches the host (netlink, eBPF), the provisioner
// holds no Kubernetes client, only dra and the operator import client-go,
// and services meet only through the protos, never importing each other.
// It also holds docs/layout.md to the packages that exist.
package boundaries
