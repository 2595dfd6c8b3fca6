package testenv

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var errMainThread = errors.New("on the main thread")

// TestStartChild_OutlivesTheCallersThread: a child with a parent-death
// signal, started from a goroutine that then exits locked to its thread
// (the thread ends with it), is killed when started by exec.Cmd.Start and
// lives on when started by StartChild.
func TestStartChild_OutlivesTheCallersThread(t *testing.T) {
	for _, tc := range []struct {
		name     string
		start    func(*exec.Cmd) error
		survives bool
	}{
		{"exec.Cmd.Start", (*exec.Cmd).Start, false},
		{"StartChild", StartChild, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command("sleep", "60")
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			for {
				started := make(chan error)
				go func() {
					runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
					if unix.Gettid() == unix.Getpid() {
						// The runtime keeps the main thread even so: another.
						runtime.UnlockOSThread()
						started <- errMainThread
						return
					}
					started <- tc.start(cmd)
				}()
				err := <-started
				if err == nil {
					break
				}
				if err != errMainThread {
					t.Fatal(err)
				}
			}
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			t.Cleanup(func() {
				_ = cmd.Process.Kill()
				<-exited
			})
			select {
			case err := <-exited:
				var ee *exec.ExitError
				killed := errors.As(err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL
				if tc.survives || !killed {
					t.Errorf("the child ended (%v); want it killed %v", err, !tc.survives)
				}
				exited <- err // for the cleanup
			case <-time.After(2 * time.Second):
				if !tc.survives {
					t.Error("the child runs on after the thread that forked it ended; want it killed by its Pdeathsig")
				}
			}
		})
	}
}
