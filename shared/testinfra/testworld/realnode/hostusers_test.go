package realnode

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// TestHostUsers: the first process in takes the snapshot, a second live
// user keeps the host as it is when the first leaves, the last one out
// restores what the first found; a dead user's file does not hold the
// host.
func TestHostUsers(t *testing.T) {
	dir := t.TempDir()
	oldDir, oldTake, oldRestore := hostUsersDir, takeSnapshot, restoreSnapshot
	t.Cleanup(func() { hostUsersDir, takeSnapshot, restoreSnapshot = oldDir, oldTake, oldRestore })
	hostUsersDir = dir
	takes, restored := 0, []string{}
	takeSnapshot = func() *hostSnapshot {
		takes++
		return &hostSnapshot{Sysctls: map[string]string{"net/ipv4/ip_forward": "0"}, Absent: []string{"/nowhere"}}
	}
	restoreSnapshot = func(s *hostSnapshot) []error {
		restored = append(restored, s.Sysctls["net/ipv4/ip_forward"]+s.Absent[0])
		return nil
	}
	// A user that died without leaving: pid 1's start time is not "1".
	if err := os.WriteFile(filepath.Join(dir, "user-1-1"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := enterHost(); err != nil {
		t.Fatal(err)
	}
	if takes != 1 {
		t.Fatalf("snapshots taken: %d, want 1", takes)
	}
	if _, err := os.Stat(filepath.Join(dir, "user-1-1")); !os.IsNotExist(err) {
		t.Errorf("the dead user's file was not pruned: %v", err)
	}
	// Another live process (this test's parent, go test) is a user too.
	other := filepath.Join(dir, "user-"+strconv.Itoa(os.Getppid())+"-"+processStart(os.Getppid()))
	if err := os.WriteFile(other, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if errs := leaveHost(); len(errs) > 0 || len(restored) > 0 {
		t.Fatalf("left with another live user: errs %v, restored %v", errs, restored)
	}
	if err := enterHost(); err != nil || takes != 1 {
		t.Fatalf("entering again beside a live user: %v, snapshots %d (want the first kept)", err, takes)
	}
	_ = os.Remove(other)
	if errs := leaveHost(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if len(restored) != 1 || restored[0] != "0/nowhere" {
		t.Fatalf("restored %v, want the first snapshot once", restored)
	}
	if _, err := os.Stat(filepath.Join(dir, snapshotFile)); !os.IsNotExist(err) {
		t.Errorf("the snapshot is still there after the last user left: %v", err)
	}
}
