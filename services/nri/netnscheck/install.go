package netnscheck

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Install copies the running executable to path (the hook's place on the
// host), through a temporary file in its directory renamed over it, mode
// 0755: a runtime running the old hook meanwhile keeps its file, and no
// container ever runs half a binary.
func Install(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("install the netns hook: %q is not a clean absolute path", path)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install the netns hook: %w", err)
	}
	src, err := os.Open(self)
	if err != nil {
		return fmt.Errorf("install the netns hook: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("install the netns hook: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install the netns hook: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install the netns hook: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("install the netns hook: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install the netns hook: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install the netns hook: %w", err)
	}
	return nil
}
