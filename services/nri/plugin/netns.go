package plugin

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"github.com/containerd/nri/pkg/api"
)

// Where a pod sandbox's network namespace is found when the runtime does
// not say: the sandbox's process in procRoot, and the runtimes' bind
// mounts of the pod namespaces in netnsDirs (containerd's and CRI-O's).
var (
	procRoot  = "/proc"
	netnsDirs = []string{"/var/run/netns"}
)

// errUndescribed refuses the containers of a pod with netdra devices whose
// sandbox the runtime describes without namespaces, when its network
// namespace cannot be found otherwise.
var errUndescribed = errors.New("the runtime describes the pod's sandbox without its namespaces, and its network namespace was not found from the sandbox's process: " +
	"the pod's devices cannot be attached (containerd does so for a sandbox whose start it was killed in and which it recovered running); delete the pod so that it gets a new sandbox")

// netnsOf is the pod's network namespace path: the one the runtime gives,
// else, for a sandbox the runtime describes no namespace of at all
// (undescribed), the bind mount of the namespace its process is in
// (netnsOfPid); empty for a host-network pod.
func netnsOf(pod *api.PodSandbox) string {
	for _, ns := range pod.GetLinux().GetNamespaces() {
		if ns.GetType() == "network" {
			return ns.GetPath()
		}
	}
	if undescribed(pod) {
		return netnsOfPid(pod.GetPid())
	}
	return ""
}

// undescribed reports whether the runtime describes none of the pod
// sandbox's namespaces: not a host-network pod (whose mount namespace, at
// least, is its own and listed), but a sandbox the runtime knows too
// little of. containerd 2.4 reports one so after it was killed between its
// start of the sandbox and its record of the sandbox's spec: it recovers
// the sandbox, running, without the spec its namespaces are read from
// (and sends no RunPodSandbox for it).
func undescribed(pod *api.PodSandbox) bool {
	return len(pod.GetLinux().GetNamespaces()) == 0
}

// netnsOfPid finds the bind mount, among netnsDirs' entries, of the
// network namespace that process pid (the sandbox's) is in: the path the
// runtime gives when it describes the sandbox. Empty when pid is unknown,
// or not this plugin's to see (a plugin in a container of its own pid
// namespace sees other processes, or none, under that pid: their network
// namespace is then the plugin's, which no runtime bind-mounts there), or
// when no runtime mounted its namespace.
func netnsOfPid(pid uint32) string {
	if pid == 0 {
		return ""
	}
	want, err := os.Stat(filepath.Join(procRoot, strconv.FormatUint(uint64(pid), 10), "ns", "net"))
	if err != nil {
		return ""
	}
	for _, dir := range netnsDirs {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			path := filepath.Join(dir, e.Name())
			if fi, err := os.Stat(path); err == nil && !e.IsDir() && os.SameFile(fi, want) {
				return path
			}
		}
	}
	return ""
}
