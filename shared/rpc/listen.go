package rpc

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// socketMode is the permission of every socket created by Listen: owner
	// and group may connect, others may not.
	socketMode = 0o660
	// maxSocketPath is the longest path a unix socket address can hold.
	maxSocketPath = len(unix.RawSockaddrUnix{}.Path)
	// staleProbeTimeout bounds the connect used to tell a live socket from a
	// stale one.
	staleProbeTimeout = time.Second
)

// ErrInUse is Listen's error when a server answers on the socket at its
// path: the path is left to that server.
var ErrInUse = errors.New("in use: a server is already listening on it")

// Listen listens on the unix socket at path and returns the listener.
//
// The parent directory is created with mode 0755 when missing, and must
// be one nobody else can put a socket of theirs in place of this one:
// owned by root or by this process's uid, not writable by others (its
// group may write: the node pod's containers share the directory through
// their group), and no directory above it writable by others without the
// sticky bit (see checkSocketDir). A socket file already at path is
// removed when nothing answers on it (it was left behind by a process
// that exited); when a server does answer, Listen fails with ErrInUse
// rather than steal the path. Any other kind of file at path is an error
// and is left alone.
// The new socket is checked to be this process's with mode 0660
// (checkSocket). Closing the listener removes the socket file.
func Listen(path string) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket path %s is %d bytes, over the %d-byte limit", path, len(path), maxSocketPath)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create socket dir: %w", err)
	}
	if err := checkSocketDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	if err := removeStale(path); err != nil {
		return nil, err
	}
	lis, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	if err := os.Chmod(path, socketMode); err != nil {
		lis.Close()
		return nil, fmt.Errorf("chmod socket: %w", err)
	}
	if err := checkSocket(path); err != nil {
		lis.Close()
		return nil, err
	}
	return lis, nil
}

// removeStale removes the socket file at path if no server answers on it.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("stat socket: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return fmt.Errorf("%s exists and is not a socket (%s)", path, fi.Mode().Type())
	}
	conn, err := net.DialTimeout("unix", path, staleProbeTimeout)
	switch {
	case err == nil:
		conn.Close()
		return fmt.Errorf("%s: %w", path, ErrInUse)
	case errors.Is(err, syscall.ECONNREFUSED):
		// Nobody listens: the file is a leftover.
	default:
		return fmt.Errorf("probe existing socket: %w", err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}
