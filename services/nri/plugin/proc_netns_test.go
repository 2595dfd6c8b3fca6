package plugin

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/netdra/netdra/shared/testinfra/testenv"
)

// TestNetnsOf_Proc: the real /proc and a real netns bind mount, as
// containerd's: this test process's own network namespace, mounted by
// `ip netns add`-style bind mount under a throwaway netns directory.
func TestNetnsOf_Proc(t *testing.T) {
	testenv.RequireRoot(t, "bind-mounts a network namespace")
	dir := t.TempDir()
	target := filepath.Join(dir, "cni-self")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("/proc/self/ns/net", target, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	old := netnsDirs
	netnsDirs = []string{dir}
	t.Cleanup(func() { netnsDirs = old })
	if got := netnsOf(undescribedPod("p", uint32(os.Getpid()))); got != target {
		t.Errorf("netnsOf = %q, want %q", got, target)
	}
}
