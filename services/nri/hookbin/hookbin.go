// Package hookbin puts netdra's OCI hook binary, netdra-hook (the netns
// check and the gate's wait, services/nri/cmd/netdra-hook), where the
// runtime runs it: nri's `install-hook`, the DaemonSet's init container,
// copies it from beside the nri binary in nri's image onto the host.
package hookbin

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Name is the hook binary's file name, beside nri's in its image.
const Name = "netdra-hook"

// Install copies the hook binary beside the running executable to path
// (the hook's place on the host), through a temporary file in its
// directory renamed over it, mode 0755: a runtime running the old hook
// meanwhile keeps its file, and no container ever runs half a binary.
func Install(path string) error {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return fmt.Errorf("install the hook: %q is not a clean absolute path", path)
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("install the hook: %w", err)
	}
	src, err := os.Open(filepath.Join(filepath.Dir(self), Name))
	if err != nil {
		return fmt.Errorf("install the hook: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("install the hook: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename: nothing
	if _, err := io.Copy(tmp, src); err != nil {
		tmp.Close()
		return fmt.Errorf("install the hook: %w", err)
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return fmt.Errorf("install the hook: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("install the hook: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("install the hook: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("install the hook: %w", err)
	}
	return nil
}
