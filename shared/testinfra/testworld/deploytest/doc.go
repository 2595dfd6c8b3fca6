// Package deploytest checks netdra's manifests (pods/) against the real
// kube-apiserver of the test world, since no cluster, container engine or
// Tilt exists where CI runs: the kustomize base, the dev overlay and the
// examples are rendered in-process (sigs.k8s.io/kustomize/api/krusty) and
// every object is applied server-side with a dry run and strict field
// validation (namespaces and CRDs for real, first, so namespaced objects
// and custom resources are validated too); the node pod and the operator
// pod pass pod admission; each component's RBAC is checked with
// SubjectAccessReviews against what the code calls; and the rendered
// DaemonSet is read for the privilege rules (only the provisioner has
// capabilities, only dra mounts kubelet directories, only nri the NRI
// socket, ...).
package deploytest
