package main

import (
	"fmt"
	"path"
)

// binDir is where every image holds its binary: the path pods/Dockerfile
// copies it to and the manifests' exec probes and Tilt's live update use.
const binDir = "/usr/local/bin"

// image is one service's image. Each describes what pods/Dockerfile's
// final stage of the same name describes (match_test.go checks that they
// agree, and that the manifests in pods/base expect the same user and
// binary).
type image struct {
	service     string // services/<service>/main.go; the image is <prefix>/<service>:<tag>
	uid, gid    int    // the user the process runs as (the Dockerfile's USER)
	description string // org.opencontainers.image.description
	extras      []program
}

// program is a binary an image holds beside its service's.
type program struct {
	name string // its file name in binDir
	pkg  string // its main package, relative to the repository
}

// images are netdra's five images. Which uid each runs as follows the
// manifests (pods/base/daemonset.yaml says why): state and the operator as
// nonroot (65532), the provisioner as root with two capabilities, dra and
// nri as root without any.
var images = []image{
	{"provisioner", 0, 0, "netdra provisioner: device discovery, VF provisioning and moving links between network namespaces", nil},
	{"state", 65532, 65532, "netdra state: the node's device inventory and allocations, durable on local disk", nil},
	{"dra", 0, 0, "netdra dra: the DRA kubelet plugin (ResourceSlices, prepare and unprepare)",
		// kubectl netdra, the on-call tool, in an image every cluster
		// running netdra already has.
		[]program{{"kubectl-netdra", "./services/cli/cmd/kubectl-netdra"}}},
	{"nri", 0, 0, "netdra nri: the NRI plugin that plugs the prepared devices into a pod's network namespace",
		// The OCI hooks' binary, which nri's install-hook copies onto the host.
		[]program{{"netdra-hook", "./services/nri/cmd/netdra-hook"}}},
	{"operator", 65532, 65532, "netdra operator: ClusterConfig to a NodeConfig per node", nil},
}

// binary is the path of the service's binary in its image.
func (i image) binary() string { return path.Join(binDir, i.service) }

// programs are the image's binaries: the service's, then its extras.
func (i image) programs() []program {
	return append([]program{{i.service, "./services/" + i.service}}, i.extras...)
}

// entrypoint is the image's entrypoint: the binary, without arguments (the
// manifests give them).
func (i image) entrypoint() []string { return []string{i.binary()} }

// user is the image config's user, numeric uid:gid as in the Dockerfile.
func (i image) user() string { return fmt.Sprintf("%d:%d", i.uid, i.gid) }

// lookup returns the image of a service.
func lookup(service string) (image, bool) {
	for _, i := range images {
		if i.service == service {
			return i, true
		}
	}
	return image{}, false
}
