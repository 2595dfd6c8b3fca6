package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
)

// proc is a child process: in its own process group, so that a Ctrl-C in
// the terminal reaches devdemo alone and devdemo stops the children in
// order; sent SIGTERM by the kernel if devdemo dies.
type proc struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	// told is set when an early exit was reported already.
	told bool
}

// startProc runs argv with stdout and stderr appended to logPath.
func startProc(name, logPath string, argv ...string) (*proc, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s log: %w", name, err)
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := testenv.StartChild(cmd); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{name: name, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// pid is the process's id.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// running reports whether the process has not exited.
func (p *proc) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop sends SIGTERM and waits up to grace for the process to end, then
// kills its process group. It is an error when the process had to be
// killed or exited with a failure other than the signal.
func (p *proc) stop(grace time.Duration) error {
	if !p.running() {
		if p.told {
			return nil
		}
		return p.exitErr()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.exited
		return fmt.Errorf("%s did not stop within %s after SIGTERM: killed (log %s)", p.name, grace, p.logPath)
	}
	// Whatever it left in its group goes too.
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	return p.exitErr()
}

// exitErr is nil for a clean exit or an exit by SIGTERM.
func (p *proc) exitErr() error {
	var ee *exec.ExitError
	if p.waitErr == nil {
		return nil
	}
	if errors.As(p.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return fmt.Errorf("%s exited: %w\n%s", p.name, p.waitErr, controlplane.TailLines(p.logPath, 15))
}

// waitUntil polls ready every 100ms until it is true, the process exits,
// ctx ends or timeout passes. The error carries the log's tail and the
// last error ready returned.
func (p *proc) waitUntil(ctx context.Context, what string, timeout time.Duration, ready func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		ok, err := ready(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-p.exited:
			p.told = true
			return fmt.Errorf("%s exited while waiting for %s: %v\n%s", p.name, what, p.waitErr, controlplane.TailLines(p.logPath, 20))
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%s: no %s after %s (last error: %v)\n%s", p.name, what, timeout, last, controlplane.TailLines(p.logPath, 20))
			}
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
