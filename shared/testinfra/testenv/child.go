package testenv

import (
	"os/exec"
	"runtime"
	"sync"
)

// StartChild starts cmd as cmd.Start does, but from an OS thread that
// lives as long as this process. A child that asks for a parent-death
// signal (SysProcAttr.Pdeathsig) gets it when the thread that forked it
// exits, not when the process does, and the Go runtime ends a thread
// whenever a goroutine exits locked to it (as one that entered another
// network namespace does): a child started from such a thread, or from
// any thread the runtime later hands to such a goroutine, is killed
// while this process runs on.
func StartChild(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	starter() <- childStart{cmd: cmd, done: done}
	return <-done
}

type childStart struct {
	cmd  *exec.Cmd
	done chan<- error
}

// starter is the goroutine that forks every StartChild: locked to its
// thread and never returning, so that thread never ends.
var starter = sync.OnceValue(func() chan<- childStart {
	ch := make(chan childStart)
	go func() {
		runtime.LockOSThread()
		for s := range ch {
			s.done <- s.cmd.Start()
		}
	}()
	return ch
})
