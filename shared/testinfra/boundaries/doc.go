// Package boundaries holds the test that enforces netdra's import rules:
// only the provisioner touches the host (netlink, eBPF), the provisioner
// holds no Kubernetes client, only dra, the operator and kubectl netdra
// (services/cli, a user's tool, not a node process) import client-go,
// and services meet only through the protos, never importing each other.
// It also holds the documentation (README.md, docs/) to the code: the
// layout names every package, links resolve, and the files, flags and
// configuration fields the pages name exist.
package boundaries
