package realnode

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// sysctlsChanged are what the kubelet (and the bridge plugin) set on the
// host; the last node to stop puts them back.
var sysctlsChanged = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward",
}

// hostPaths are written by the kubelet, containerd, CRI-O (its pinned
// IPC, UTS and user namespaces beside /var/run/netns) or libcni outside a
// node's directory whatever their configuration says.
var hostPaths = []string{"/var/lib/kubelet", "/var/log/containers", "/var/lib/cni", "/run/containerd",
	"/run/crio", "/var/lib/crio", "/run/ipcns", "/run/utsns", "/run/userns"}

// cgroupTops are the cgroups the kubelet and containerd create under each
// hierarchy for pods.
var cgroupTops = []string{"kubepods", "k8s.io"}

// hostSnapshot is the host's state before the first node started.
type hostSnapshot struct {
	Sysctls map[string]string `json:"sysctls"`
	Absent  []string          `json:"absent"` // hostPaths and cgroups that did not exist
}

func snapshotHost() *hostSnapshot {
	s := &hostSnapshot{Sysctls: map[string]string{}}
	for _, k := range sysctlsChanged {
		if b, err := os.ReadFile("/proc/sys/" + k); err == nil {
			s.Sysctls[k] = strings.TrimSpace(string(b))
		}
	}
	for _, p := range append(hostPaths, cgroupDirs()...) {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			s.Absent = append(s.Absent, p)
		}
	}
	return s
}

// cgroupDirs are the pod cgroup tops in every mounted hierarchy.
func cgroupDirs() []string {
	var out []string
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hier, "/sys/fs/cgroup") {
		for _, top := range cgroupTops {
			out = append(out, filepath.Join(h, top))
		}
	}
	return out
}

// restore puts the sysctls back and removes the paths that were absent,
// with whatever is mounted under them.
func (s *hostSnapshot) restore() []error {
	var errs []error
	for k, v := range s.Sysctls {
		b, err := os.ReadFile("/proc/sys/" + k)
		if err != nil || strings.TrimSpace(string(b)) == v {
			continue
		}
		if err := os.WriteFile("/proc/sys/"+k, []byte(v), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restoring sysctl %s: %w", k, err))
		}
	}
	for _, p := range s.Absent {
		if strings.HasPrefix(p, "/sys/fs/cgroup/") {
			removeEmptyTree(p)
			continue
		}
		// CRI-O pins a sandbox's IPC, UTS and user namespaces as bind
		// mounts under /run/*ns; a crio killed before it tore a sandbox
		// down leaves them mounted, and a mount point cannot be unlinked.
		for _, m := range MountsUnder(p) {
			_ = unix.Unmount(m, unix.MNT_DETACH)
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errs
}

// removeEmptyTree removes a cgroup and its children, deepest first; a
// cgroup still in use stays.
func removeEmptyTree(root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		_ = unix.Rmdir(dirs[i])
	}
}

// cleanHost removes what this node made outside its processes: mounts
// under its directory (the kubelet's bind mount of its root, containers'
// rootfs and shm), its pods' network namespaces, its CNI bridge, the
// kubelet's log links to its containers and libcni's cache of its pods.
func (n *Node) cleanHost() []error {
	var errs []error
	for _, m := range MountsUnder(n.cfg.Dir) {
		if err := unix.Unmount(m, 0); err != nil {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
	}
	for _, ns := range n.netnsLeft() {
		_ = exec.Command("ip", "netns", "del", ns).Run()
	}
	if exec.Command("ip", "link", "show", n.Bridge()).Run() == nil {
		if out, err := exec.Command("ip", "link", "del", n.Bridge()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("deleting bridge %s: %v: %s", n.Bridge(), err, out))
		}
	}
	links, _ := filepath.Glob("/var/log/containers/*.log")
	for _, l := range links {
		if to, err := os.Readlink(l); err == nil && strings.HasPrefix(to, n.cfg.Dir+"/") {
			_ = os.Remove(l)
		}
	}
	results, _ := filepath.Glob("/var/lib/cni/results/" + n.Bridge() + "-*")
	for _, r := range results {
		_ = os.Remove(r)
	}
	return errs
}

// netnsLeft are the network namespaces of this node's sandboxes that
// containerd did not remove (a sandbox never torn down), as recorded by
// netnsOf while the node ran.
func (n *Node) netnsLeft() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for ns := range n.netns {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			out = append(out, ns)
		}
	}
	return out
}

// MountsUnder lists the mount points at and under dir, deepest first.
func MountsUnder(dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}
