package store

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"
)

// stateMode is the state file's mode: the state service's uid alone reads
// and writes it.
const stateMode = 0o600

// checkFile checks the state file at path before it is opened. Missing is
// fine (bbolt creates it with stateMode). Otherwise it must be a regular
// file (not a symlink), owned by this process's uid, that neither its
// group nor others may write, in a directory others may not write:
// whoever else could write it could have forged its allocations, so such a
// file is refused and left as it is. A file only readable by others is
// made stateMode, with a warning: nothing in it can have been forged, and
// from now on it is not read by others either.
func checkFile(path string, log *slog.Logger) error {
	if dir, err := os.Stat(filepath.Dir(path)); err == nil && dir.Mode().Perm()&0o002 != 0 && dir.Mode()&fs.ModeSticky == 0 {
		return fmt.Errorf("state file %s: its directory has mode %#o: anyone may replace the file; refusing it (chmod o-w %s)",
			path, dir.Mode().Perm(), filepath.Dir(path))
	}
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("state file %s: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("state file %s is not a regular file (%s); refusing it", path, fi.Mode().Type())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("state file %s is owned by uid %d, not by this process's uid %d; refusing it (whoever owns it may have written it: check it, then chown it)",
			path, st.Uid, os.Geteuid())
	}
	perm := fi.Mode().Perm()
	if perm&0o022 != 0 {
		return fmt.Errorf("state file %s has mode %#o: others may write it, so its allocations cannot be trusted; refusing it (check it, then chmod %o %s, or move it aside)",
			path, perm, stateMode, path)
	}
	if perm&^stateMode != 0 {
		if err := os.Chmod(path, stateMode); err != nil {
			return fmt.Errorf("state file %s has mode %#o, and making it %#o failed: %w", path, perm, stateMode, err)
		}
		log.Warn("State file was readable by others; made it owner-only", "file", path, "mode", fmt.Sprintf("%#o", perm), "now", fmt.Sprintf("%#o", stateMode))
	}
	return nil
}
