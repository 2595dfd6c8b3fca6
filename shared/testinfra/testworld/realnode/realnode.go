// Package realnode runs real Kubernetes nodes for the test world: a real
// kubelet v1.37.2 and a real containerd v2.4.2 with CRI and NRI, runc and
// the CNI plugins, on this machine, against the test world's control plane.
// Pods on such a node run real containers; netdra's dra registers with the
// real kubelet and its nri plugin with containerd's NRI socket, as on a
// platform engineer's node.
//
// Build compiles the programs from module sources (no prebuilt binary, no
// registry: the pause and test-app images are static Go programs packed
// here) and caches them. Start runs one node with every path under its own
// directory; Stop removes everything the node made, on the host too:
// processes, containers, mounts (the kubelet bind-mounts its root dir),
// network namespaces and links of its pods, its CNI bridge, the cgroups its
// pods left, the sysctls the kubelet changed and the paths it writes
// outside its directory (/var/lib/kubelet/device-plugins,
// /var/log/containers, /var/lib/cni).
//
// Several nodes may run at once in one process (each with its own ports,
// bridge and pod subnet); they share the host's network namespace.
package realnode

// RequiredPluginsAnnotation is the pod annotation NRI's default validator
// reads (containerd 2.2 and later, on in the node's config): the NRI plugins
// that must be connected for the pod's containers to be created.
const RequiredPluginsAnnotation = "required-plugins.noderesource.dev/pod"
