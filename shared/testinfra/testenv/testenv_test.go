package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequireRootStrict runs RequireRoot in a child as an unprivileged
// user (when this test runs as root): it skips, and fails under
// NETDRA_TEST_STRICT=1.
func TestRequireRootStrict(t *testing.T) {
	if os.Getenv("TESTENV_CHILD") == "1" {
		RequireRoot(t, "the child")
		return
	}
	if os.Geteuid() != 0 {
		if Strict() {
			t.Fatal("running as non-root under strict mode")
		}
		t.Skip("runs its child as nobody: needs root")
	}
	bin := worldReadableCopy(t, os.Args[0]) // the go tool's temp dir is 0700
	for _, tc := range []struct {
		strict   string
		wantFail bool
		wantOut  string
	}{
		{strict: "", wantFail: false, wantOut: "needs root: the child"},
		{strict: "1", wantFail: true, wantOut: "forbids skipping"},
	} {
		cmd := exec.Command(bin, "-test.run", "^TestRequireRootStrict$", "-test.v")
		cmd.Env = append(os.Environ(), "TESTENV_CHILD=1", StrictEnv+"="+tc.strict)
		cmd.SysProcAttr = nobody()
		out, err := cmd.CombinedOutput()
		if failed := err != nil; failed != tc.wantFail {
			t.Errorf("strict=%q: failed=%v, want %v:\n%s", tc.strict, failed, tc.wantFail, out)
		}
		if !strings.Contains(string(out), tc.wantOut) {
			t.Errorf("strict=%q: output lacks %q:\n%s", tc.strict, tc.wantOut, out)
		}
	}
}

func worldReadableCopy(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "testenv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "testenv.test")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}
