package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/netdra/netdra/shared/testinfra/testenv"
)

func TestNetnsOfSandbox(t *testing.T) {
	tests := []struct {
		name, info, want, wantErr string
	}{
		{name: "named by containerd",
			info: `{"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"},{"type":"network","path":"/var/run/netns/cni-1234"}]}}}`,
			want: "cni-1234"},
		{name: "under /run/netns", info: `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/run/netns/cni-1"}]}}}`, want: "cni-1"},
		{name: "elsewhere", info: `{"runtimeSpec":{"linux":{"namespaces":[{"type":"network","path":"/proc/12/ns/net"}]}}}`, wantErr: "not a named one"},
		{name: "host network", info: `{"runtimeSpec":{"linux":{"namespaces":[{"type":"pid"}]}}}`, wantErr: "no network namespace"},
		{name: "not json", info: `{`, wantErr: "sandbox info"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := netnsOfSandbox(tt.info)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("netnsOfSandbox = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestMountsUnder lists mounts under a folder, deepest first, and not the
// folder's siblings.
func TestMountsUnder(t *testing.T) {
	testenv.RequireRoot(t, "mounts tmpfs")
	dir := t.TempDir()
	for _, d := range []string{"a", "a/b", "ax"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := filepath.Join(dir, "a")
	for _, m := range []string{a, filepath.Join(a, "b")} {
		if out, err := exec.Command("mount", "-t", "tmpfs", "tmpfs", m).CombinedOutput(); err != nil {
			t.Skipf("mount tmpfs: %v %s", err, out)
		}
		t.Cleanup(func() { _ = exec.Command("umount", "-l", m).Run() })
		if m == a {
			_ = os.MkdirAll(filepath.Join(a, "b"), 0o755)
		}
	}
	if diff := cmp.Diff([]string{filepath.Join(a, "b"), a}, MountsUnder(dir)); diff != "" {
		t.Errorf("mounts under %s (-want +got):\n%s", dir, diff)
	}
	if got := MountsUnder(filepath.Join(dir, "ax")); len(got) != 0 {
		t.Errorf("mounts under a sibling: %v", got)
	}
}
