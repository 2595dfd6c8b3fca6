package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

const netDev = `Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
  eth0:    1296      16    0    0    0     0          0         0      726       9    0    0    0     0       0          0
  net1:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
`

func fakeProc(t *testing.T, pid, content string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, pid, "net")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dev"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func TestCheck(t *testing.T) {
	proc := fakeProc(t, "4242", netDev)
	for _, tc := range []struct {
		name    string
		ifnames []string
		stdin   string
		wantErr string // "" for success
	}{
		{name: "all there", ifnames: []string{"net1"}, stdin: `{"id":"c1","pid":4242}`},
		{name: "several, all there", ifnames: []string{"net1", "eth0"}, stdin: `{"ociVersion":"1.2.0","id":"c1","pid":4242,"status":"created"}`},
		{name: "one missing", ifnames: []string{"net1", "net2"}, stdin: `{"id":"c1","pid":4242}`, wantErr: "net2 not in the network namespace of container c1"},
		{name: "a header word is no interface", ifnames: []string{"face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed"}, stdin: `{"id":"c1","pid":4242}`, wantErr: "not in the network namespace"},
		{name: "no state", ifnames: []string{"net1"}, stdin: ``, wantErr: "reading the OCI state"},
		{name: "no pid", ifnames: []string{"net1"}, stdin: `{"id":"c1"}`, wantErr: "names no container process"},
		{name: "process gone", ifnames: []string{"net1"}, stdin: `{"id":"c1","pid":7}`, wantErr: "reading the container's interfaces"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check{IfNames: tc.ifnames, ProcRoot: proc}.Run(strings.NewReader(tc.stdin))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Run: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Run: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}

// TestCheck_WaitsForAnAttach: an interface that appears within Wait passes.
func TestCheck_WaitsForAnAttach(t *testing.T) {
	proc := fakeProc(t, "4242", strings.ReplaceAll(netDev, "net1", "eth9"))
	go func() {
		time.Sleep(150 * time.Millisecond)
		_ = os.WriteFile(filepath.Join(proc, "4242", "net", "dev"), []byte(netDev), 0o644)
	}()
	if err := (Check{IfNames: []string{"net1"}, ProcRoot: proc, Wait: 10 * time.Second}).Run(strings.NewReader(`{"id":"c1","pid":4242}`)); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// TestCheck_RealProcess reads this test's own netns: lo is there.
func TestCheck_RealProcess(t *testing.T) {
	pid := os.Getpid()
	err := Check{IfNames: []string{"lo"}, ProcRoot: "/proc"}.Run(strings.NewReader(`{"id":"self","pid":` + strconv.Itoa(pid) + `}`))
	if err != nil {
		t.Fatalf("Run on this process: %v", err)
	}
}
