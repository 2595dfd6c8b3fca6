package realnode

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestKillStragglers: a container monitor naming the node's folder is
// killed with what runs under it; a monitor of another folder and a
// process that only names the folder are left alone.
func TestKillStragglers(t *testing.T) {
	dir, other := t.TempDir(), t.TempDir()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	conmon := filepath.Join(t.TempDir(), "conmon")
	if err := os.Symlink(sh, conmon); err != nil {
		t.Fatal(err)
	}
	start := func(name string, args ...string) *exec.Cmd {
		c := exec.Command(name, args...)
		c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL); _ = c.Wait() })
		return c
	}
	// The monitor's child, a sleep, writes its pid where the test reads it.
	pidFile := filepath.Join(t.TempDir(), "child")
	mine := start(conmon, "-c", `sleep 300 & echo $! >"$1"; wait`, "conmon", pidFile, dir+"/crio/run/x/userdata")
	theirs := start(conmon, "-c", "sleep 300 & wait", "conmon", other+"/crio/run/x/userdata")
	bystander := start(sh, "-c", "sleep 300 & wait", "sh", dir+"/")
	var child int
	for deadline := time.Now().Add(10 * time.Second); child == 0; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(pidFile); err == nil && strings.HasSuffix(string(b), "\n") {
			if child, err = strconv.Atoi(strings.TrimSpace(string(b))); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the monitor's child never started")
		}
	}

	killed := killStragglers(dir)
	if len(killed) != 2 {
		t.Errorf("killed %q, want the monitor and its child", killed)
	}
	if err := mine.Wait(); err == nil {
		t.Error("the monitor of the node's folder exited cleanly: not killed")
	}
	// The child was the monitor's; once killed it is a zombie of init's or
	// gone, and no signal reaches a live process.
	for deadline := time.Now().Add(10 * time.Second); alive(child); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the monitor's child %d still runs", child)
		}
	}
	for _, c := range []*exec.Cmd{theirs, bystander} {
		if !alive(c.Process.Pid) {
			t.Errorf("%q killed though it is no monitor of the node's folder", c.Args)
		}
	}
}

// alive: pid runs (a zombie does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	return err == nil && !strings.Contains(string(b[strings.LastIndexByte(string(b), ')')+1:]), " Z ")
}
