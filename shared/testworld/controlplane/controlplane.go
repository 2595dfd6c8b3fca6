// Package controlplane starts a real Kubernetes v1.37 control plane —
// embedded etcd, kube-apiserver, kube-controller-manager (all controllers
// but node-lifecycle) and kube-scheduler — for tests and for the testworld
// command, on free loopback ports.
//
// The control plane runs in a child process, the testworld binary's
// "control-plane" subcommand: the Kubernetes components keep process-wide
// state and cannot be started twice in one process, and a process is the
// one thing that always stops cleanly (ports, etcd and goroutines go with
// it). Importing this package does not link k8s.io/kubernetes; the binary is
// found or built by Binary.
package controlplane

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Options configures Start.
type Options struct {
	// Dir holds etcd's data, the PKI, the admin kubeconfig and the
	// components' log (controlplane.log). It must exist; the caller
	// removes it.
	Dir string
	// Logger receives progress lines. Default: discard.
	Logger *slog.Logger
	// Binary is the testworld binary to run. Default: see Binary.
	Binary string
	// Verbosity is the components' klog -v in controlplane.log. Default 0.
	Verbosity int
	// StartTimeout bounds the start, once the binary exists. Default 2m.
	StartTimeout time.Duration
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	info      Info
	rest      *rest.Config
	client    kubernetes.Interface
	cmd       *exec.Cmd
	stdin     io.Closer
	exited    chan struct{}
	waitErr   error
	logPath   string
	log       *slog.Logger
	stopOnce  sync.Once
	stopErr   error
	startedIn time.Duration
}

// Info is what the child process reports once the control plane is ready.
// It is the JSON line the control-plane subcommand prints on stdout.
type Info struct {
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Etcd       string `json:"etcd"`
}

// Start runs the control plane in a child process and returns once the
// apiserver answers /readyz and the controller-manager and scheduler run.
// The child ends when Stop is called or when this process dies (it watches
// its stdin). ctx bounds the start only.
func Start(ctx context.Context, opts Options) (*ControlPlane, error) {
	if opts.Dir == "" {
		return nil, errors.New("controlplane: no Dir")
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	bin := opts.Binary
	if bin == "" {
		var err error
		if bin, err = Binary(ctx, logger); err != nil {
			return nil, err
		}
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("control plane dir: %w", err)
	}
	logPath := filepath.Join(dir, "controlplane.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("control plane log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor

	cmd := exec.Command(bin, "control-plane", "--dir", dir, "--v", strconv.Itoa(opts.Verbosity))
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C in a terminal reaches the parent,
	// which stops the world in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("control plane stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("control plane stdout: %w", err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	cp := &ControlPlane{cmd: cmd, stdin: stdin, exited: make(chan struct{}), logPath: logPath, log: logger}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		cp.waitErr = cmd.Wait()
		close(cp.exited)
	}()

	timer := time.NewTimer(opts.StartTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &cp.info); err != nil || cp.info.Kubeconfig == "" {
			cp.kill()
			return nil, fmt.Errorf("control plane said %q, want its JSON info (%v)", line, err)
		}
	case <-cp.exited:
		return nil, fmt.Errorf("control plane exited during start (%v): %s", cp.waitErr, tail(logPath, 20))
	case <-timer.C:
		cp.kill()
		return nil, fmt.Errorf("control plane not ready after %s: %s", opts.StartTimeout, tail(logPath, 20))
	case <-ctx.Done():
		cp.kill()
		return nil, ctx.Err()
	}
	cp.startedIn = time.Since(t0)

	cfg, err := clientcmd.BuildConfigFromFlags("", cp.info.Kubeconfig)
	if err != nil {
		cp.kill()
		return nil, fmt.Errorf("control plane kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400 // tests create objects in bursts
	cp.rest = cfg
	if cp.client, err = kubernetes.NewForConfig(cfg); err != nil {
		cp.kill()
		return nil, fmt.Errorf("control plane client: %w", err)
	}
	logger.Info("control plane ready", "server", cp.info.Server, "kubeconfig", cp.info.Kubeconfig,
		"pid", cmd.Process.Pid, "took", cp.startedIn.Round(time.Millisecond), "log", logPath)
	return cp, nil
}

// Kubeconfig is the path of the admin (system:masters) kubeconfig.
func (c *ControlPlane) Kubeconfig() string { return c.info.Kubeconfig }

// Server is the apiserver's URL.
func (c *ControlPlane) Server() string { return c.info.Server }

// RESTConfig returns a copy of the admin client configuration.
func (c *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Client is an admin clientset.
func (c *ControlPlane) Client() kubernetes.Interface { return c.client }

// LogPath is the file the components log to.
func (c *ControlPlane) LogPath() string { return c.logPath }

// PID is the child process's id.
func (c *ControlPlane) PID() int { return c.cmd.Process.Pid }

// StartedIn is how long the control plane took from exec to ready.
func (c *ControlPlane) StartedIn() time.Duration { return c.startedIn }

// Exited is closed when the child process has ended.
func (c *ControlPlane) Exited() <-chan struct{} { return c.exited }

// stopGrace is how long the child may take to stop its components and
// close etcd before it is killed.
const stopGrace = 20 * time.Second

// Stop ends the control plane: the child stops the scheduler, the
// controller-manager and the apiserver, closes etcd and exits; it is killed
// if it takes longer than 20s. Every port is free once Stop returns. Stop
// is idempotent; the error tells whether the child ended cleanly.
func (c *ControlPlane) Stop() error {
	c.stopOnce.Do(func() {
		t0 := time.Now()
		c.stdin.Close() // EOF on stdin is the child's signal to stop
		select {
		case <-c.exited:
		case <-time.After(stopGrace):
			c.log.Warn("control plane did not stop in time, killing it", "pid", c.cmd.Process.Pid)
			c.kill()
			c.stopErr = fmt.Errorf("control plane killed after %s", stopGrace)
			return
		}
		// Whatever the child left in its group goes too.
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		if c.waitErr != nil {
			c.stopErr = fmt.Errorf("control plane exit: %w: %s", c.waitErr, tail(c.logPath, 10))
		}
		c.log.Info("control plane stopped", "took", time.Since(t0).Round(time.Millisecond))
	})
	return c.stopErr
}

func (c *ControlPlane) kill() {
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
	<-c.exited
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "log " + path + ":\n" + strings.Join(lines, "\n")
}
