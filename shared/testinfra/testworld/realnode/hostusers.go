package realnode

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Nodes of several test processes may run on the host at once (make
// test-world runs the end-to-end tests in two processes). What the host
// looked like before any of them is kept in hostUsersDir, with one file
// per process that has nodes running: the first process in takes the
// snapshot, the last one out restores it. A process that died without
// leaving is recognised by its pid and start time and pruned.
var hostUsersDir = "/run/netdra-realnode"

const snapshotFile = "host-snapshot.json"

// takeSnapshot and restoreSnapshot are replaced by the tests of the
// registry, which must not touch the host.
var (
	takeSnapshot    = snapshotHost
	restoreSnapshot = (*hostSnapshot).restore
)

// enterHost registers this process as a user of the host, taking the
// snapshot when it is the first.
func enterHost() error {
	return withHostLock(func() error {
		users, err := liveUsers()
		if err != nil {
			return err
		}
		snap := filepath.Join(hostUsersDir, snapshotFile)
		if _, err := os.Stat(snap); errors.Is(err, os.ErrNotExist) {
			// No snapshot: no user, or only dead ones that restored nothing.
			if len(users) > 0 {
				return fmt.Errorf("realnode: users %v of the host but no snapshot in %s", users, hostUsersDir)
			}
			b, err := json.Marshal(takeSnapshot())
			if err != nil {
				return err
			}
			if err := os.WriteFile(snap, b, 0o600); err != nil {
				return fmt.Errorf("realnode: writing the host snapshot: %w", err)
			}
		}
		return os.WriteFile(filepath.Join(hostUsersDir, "user-"+selfID()), nil, 0o600)
	})
}

// leaveHost unregisters this process and, when no live user is left,
// restores the snapshot and removes it.
func leaveHost() []error {
	var errs []error
	err := withHostLock(func() error {
		_ = os.Remove(filepath.Join(hostUsersDir, "user-"+selfID()))
		users, err := liveUsers()
		if err != nil || len(users) > 0 {
			return err
		}
		snap := filepath.Join(hostUsersDir, snapshotFile)
		b, err := os.ReadFile(snap)
		if err != nil {
			return fmt.Errorf("realnode: reading the host snapshot: %w", err)
		}
		var s hostSnapshot
		if err := json.Unmarshal(b, &s); err != nil {
			return fmt.Errorf("realnode: the host snapshot %s: %w", snap, err)
		}
		errs = append(errs, restoreSnapshot(&s)...)
		return os.Remove(snap)
	})
	if err != nil {
		errs = append(errs, err)
	}
	return errs
}

// withHostLock runs fn holding an exclusive lock on hostUsersDir.
func withHostLock(fn func() error) error {
	if err := os.MkdirAll(hostUsersDir, 0o700); err != nil {
		return fmt.Errorf("realnode: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(hostUsersDir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("realnode: %w", err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("realnode: locking %s: %w", f.Name(), err)
	}
	defer unix.Flock(int(f.Fd()), unix.LOCK_UN) //nolint:errcheck // closing unlocks too
	return fn()
}

// liveUsers lists the registered processes still alive, removing the
// files of the dead.
func liveUsers() ([]string, error) {
	files, err := filepath.Glob(filepath.Join(hostUsersDir, "user-*"))
	if err != nil {
		return nil, err
	}
	var live []string
	for _, f := range files {
		id := strings.TrimPrefix(filepath.Base(f), "user-")
		pid, start, _ := strings.Cut(id, "-")
		if p, err := strconv.Atoi(pid); err == nil && processStart(p) == start && start != "" {
			live = append(live, id)
			continue
		}
		_ = os.Remove(f)
	}
	return live, nil
}

// selfID names this process: its pid and start time, so that a reused
// pid is not taken for it.
func selfID() string {
	return strconv.Itoa(os.Getpid()) + "-" + processStart(os.Getpid())
}

// processStart is field 22 of /proc/<pid>/stat (the start time in clock
// ticks since boot), or "" when the process is gone.
func processStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count from after it.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return ""
	}
	return f[19]
}
