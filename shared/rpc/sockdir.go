package rpc

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// checkSocketDir checks the directory a socket is created in: a directory
// owned by root or by this process's uid, that others may not write, with
// no directory above it that others may write without the sticky bit.
// Whoever else could write in it, or rename a directory above it, could
// put a socket of theirs where clients look for this one, or take this one
// away. Its group may write it: the node pod's containers (different
// uids, one fsGroup) share their socket directory so.
func checkSocketDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("socket dir %s: %w", dir, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return fmt.Errorf("socket dir: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("socket dir %s is not a directory", abs)
	}
	if uid, ok := ownerOf(fi); ok && uid != 0 && uid != os.Geteuid() {
		return fmt.Errorf("socket dir %s is owned by uid %d, neither root nor this process's uid %d: refusing to listen in it", abs, uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return fmt.Errorf("socket dir %s has mode %#o: anyone may create or replace sockets in it; refusing to listen in it (chmod o-w %s)",
			abs, fi.Mode().Perm(), abs)
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		up, err := os.Stat(d)
		if err != nil {
			return fmt.Errorf("socket dir %s: %w", abs, err)
		}
		if up.Mode().Perm()&0o002 != 0 && up.Mode()&fs.ModeSticky == 0 {
			return fmt.Errorf("socket dir %s is inside %s, which has mode %#o: anyone may rename what is in it; refusing to listen there", abs, d, up.Mode().Perm())
		}
		if d == filepath.Dir(d) {
			return nil
		}
	}
}

// checkSocket checks a socket Listen made: a socket of this process's uid
// with mode socketMode, so no one else swapped it in the meantime.
func checkSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("socket %s after listening: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("socket %s is a %v after listening, not a socket", path, fi.Mode().Type())
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("socket %s is owned by uid %d, not by this process's uid %d", path, uid, os.Geteuid())
	}
	if p := fi.Mode().Perm(); p != socketMode {
		return fmt.Errorf("socket %s has mode %#o, want %#o", path, p, socketMode)
	}
	return nil
}

func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
