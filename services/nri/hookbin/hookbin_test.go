package hookbin

import (
	"os"
	"path/filepath"
	"testing"
)

// TestInstall copies the hook binary beside the running executable (this
// test binary; a fake hook put there for the test) into place, 0755,
// replacing an old one, and refuses a relative path.
func TestInstall(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	hook := filepath.Join(filepath.Dir(self), Name)
	if err := os.WriteFile(hook, []byte("the hook"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(hook) })
	dir := t.TempDir()
	path := filepath.Join(dir, Name)
	if err := os.WriteFile(path, []byte("old"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Install(path); err != nil {
		t.Fatalf("Install: %v", err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "the hook" {
		t.Fatalf("installed %q (%v), want the hook", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d files in the directory, want only the hook", len(entries))
	}
	if err := Install("rel/" + Name); err == nil {
		t.Error("Install of a relative path succeeded")
	}
	os.Remove(hook)
	if err := Install(filepath.Join(dir, "again")); err == nil {
		t.Error("Install without a hook beside the executable succeeded")
	}
}
