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
	// PodAccess makes the kubernetes Service answer on this host, as
	// kube-proxy would on a node: its ClusterIP (a /28 of 172.16.0.0/12
	// of this control plane's own) is added to lo and its port 443
	// forwarded to the apiserver, so that pods of a real node, in the
	// host's network namespace or on the node's bridge, reach the
	// apiserver with their in-cluster configuration and projected
	// ServiceAccount token. It needs root; the address goes at Stop.
	PodAccess bool
	// ComponentQPS, when positive, is the controller-manager's and the
	// scheduler's apiserver client rate (burst twice that); 0 keeps their
	// defaults. SetComponentQPS changes it for the next Restart.
	ComponentQPS float64
}

// ControlPlane is a running control plane.
type ControlPlane struct {
	rest    *rest.Config
	client  kubernetes.Interface
	logPath string
	log     *slog.Logger
	bin     string
	dir     string
	opts    Options

	mu        sync.Mutex // guards the fields below, which Restart replaces
	info      Info
	child     *child
	startedIn time.Duration
	stopped   bool
	stopErr   error
}

// child is one run of the control-plane child process.
type child struct {
	cmd     *exec.Cmd
	stdin   io.Closer
	exited  chan struct{}
	waitErr error // set before exited is closed
}

// Info is what the child process reports once the control plane is ready.
// It is the JSON line the control-plane subcommand prints on stdout.
type Info struct {
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Etcd       string `json:"etcd"`
	// KubernetesService is the kubernetes Service's ClusterIP:443
	// (answering only with PodAccess).
	KubernetesService string `json:"kubernetesService"`
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
	cp := &ControlPlane{log: logger, bin: bin, dir: dir, opts: opts, logPath: filepath.Join(dir, "controlplane.log")}
	ch, info, took, err := cp.launch(ctx, os.O_TRUNC)
	if err != nil {
		return nil, err
	}
	cp.child, cp.info, cp.startedIn = ch, info, took

	cfg, err := clientcmd.BuildConfigFromFlags("", info.Kubeconfig)
	if err != nil {
		ch.kill()
		return nil, fmt.Errorf("control plane kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = 200, 400 // tests create objects in bursts
	cp.rest = cfg
	if cp.client, err = kubernetes.NewForConfig(cfg); err != nil {
		ch.kill()
		return nil, fmt.Errorf("control plane client: %w", err)
	}
	logger.Info("control plane ready", "server", info.Server, "kubeconfig", info.Kubeconfig,
		"pid", ch.cmd.Process.Pid, "took", took.Round(time.Millisecond), "log", cp.logPath)
	return cp, nil
}

// launch runs a child on the control plane's dir and waits for its Info
// line; logFlag is os.O_TRUNC for the first run and os.O_APPEND after.
func (c *ControlPlane) launch(ctx context.Context, logFlag int) (*child, Info, time.Duration, error) {
	var info Info
	logFile, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return nil, info, 0, fmt.Errorf("control plane log: %w", err)
	}
	defer logFile.Close() // the child holds its own descriptor

	args := []string{"control-plane", "--dir", c.dir, "--v", strconv.Itoa(c.opts.Verbosity)}
	if c.opts.PodAccess {
		args = append(args, "--pod-access")
	}
	if c.opts.ComponentQPS > 0 {
		args = append(args, "--component-qps", strconv.FormatFloat(c.opts.ComponentQPS, 'f', -1, 64))
	}
	cmd := exec.Command(c.bin, args...)
	cmd.Stderr = logFile
	// Its own process group: a Ctrl-C in a terminal reaches the parent,
	// which stops the world in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, info, 0, fmt.Errorf("control plane stdin: %w", err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, info, 0, fmt.Errorf("control plane stdout: %w", err)
	}
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, info, 0, fmt.Errorf("starting %s: %w", c.bin, err)
	}
	ch := &child{cmd: cmd, stdin: stdin, exited: make(chan struct{})}
	lines := firstLines(stdout)
	go func() {
		ch.waitErr = cmd.Wait()
		close(ch.exited)
	}()

	timer := time.NewTimer(c.opts.StartTimeout)
	defer timer.Stop()
	select {
	case line := <-lines:
		if err := json.Unmarshal([]byte(line), &info); err != nil || info.Kubeconfig == "" {
			ch.kill()
			return nil, info, 0, fmt.Errorf("control plane said %q, want its JSON info (%v)", line, err)
		}
	case <-ch.exited:
		return nil, info, 0, fmt.Errorf("control plane exited during start (%v): %s", ch.waitErr, TailLines(c.logPath, 20))
	case <-timer.C:
		ch.kill()
		return nil, info, 0, fmt.Errorf("control plane not ready after %s: %s", c.opts.StartTimeout, TailLines(c.logPath, 20))
	case <-ctx.Done():
		ch.kill()
		return nil, info, 0, ctx.Err()
	}
	return ch, info, time.Since(t0), nil
}

// firstLines reads r's lines in a goroutine and hands them over while
// someone takes them (the first one: the child's JSON info), dropping the
// rest.
func firstLines(r io.Reader) <-chan string {
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	return lines
}

// Kubeconfig is the path of the admin (system:masters) kubeconfig.
func (c *ControlPlane) Kubeconfig() string { return c.currentInfo().Kubeconfig }

// Server is the apiserver's URL. It stays the same across Restart.
func (c *ControlPlane) Server() string { return c.currentInfo().Server }

// KubernetesService is the kubernetes Service's ClusterIP and port, what
// pods see as KUBERNETES_SERVICE_HOST and _PORT; it answers only with
// Options.PodAccess.
func (c *ControlPlane) KubernetesService() string { return c.currentInfo().KubernetesService }

// RESTConfig returns a copy of the admin client configuration.
func (c *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(c.rest) }

// Client is an admin clientset. It keeps working across Restart.
func (c *ControlPlane) Client() kubernetes.Interface { return c.client }

// LogPath is the file the components log to (every run's, after Restart).
func (c *ControlPlane) LogPath() string { return c.logPath }

// PID is the current child process's id.
func (c *ControlPlane) PID() int { return c.current().cmd.Process.Pid }

// StartedIn is how long the current child took from exec to ready.
func (c *ControlPlane) StartedIn() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.startedIn
}

// Exited is closed when the current child process has ended; after a
// Restart it is a new channel.
func (c *ControlPlane) Exited() <-chan struct{} { return c.current().exited }

func (c *ControlPlane) current() *child {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.child
}

func (c *ControlPlane) currentInfo() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.info
}

// stopGrace is how long the child may take to stop its components and
// close etcd before it is killed.
const stopGrace = 20 * time.Second

// Stop ends the control plane: the child stops the scheduler, the
// controller-manager and the apiserver, closes etcd and exits; it is killed
// if it takes longer than 20s. Every port is free once Stop returns. Stop
// is idempotent; the error tells whether the child ended cleanly.
func (c *ControlPlane) Stop() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		c.stopped = true
		c.stopErr = c.stopChild(c.child)
	}
	return c.stopErr
}

// SetComponentQPS sets Options.ComponentQPS for the next Restart.
func (c *ControlPlane) SetComponentQPS(qps float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.opts.ComponentQPS = qps
}

// Restart stops the control plane as Stop does (kill: with SIGKILL at
// once, as a crash) and starts it again on the same directory: etcd keeps
// its data, and the apiserver comes back on the same address with the same
// certificates, so Client, RESTConfig and the kubeconfig keep working, as
// for every client of a real apiserver that restarted. It returns once the
// new apiserver is ready; objects written before are there. Calls must not
// overlap; Restart after Stop is an error.
func (c *ControlPlane) Restart(ctx context.Context, kill bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return errors.New("control plane: Restart after Stop")
	}
	old := c.child
	if kill {
		old.kill()
	} else if err := c.stopChild(old); err != nil {
		c.log.Warn("control plane did not stop cleanly before its restart", "err", err)
	}
	ch, info, took, err := c.launch(ctx, os.O_APPEND)
	if err != nil {
		c.stopped, c.stopErr = true, err
		return fmt.Errorf("restarting the control plane: %w", err)
	}
	if info.Server != c.info.Server || info.Kubeconfig != c.info.Kubeconfig {
		ch.kill()
		c.stopped = true
		c.stopErr = fmt.Errorf("control plane came back as %s (%s), not %s (%s)", info.Server, info.Kubeconfig, c.info.Server, c.info.Kubeconfig)
		return c.stopErr
	}
	c.child, c.info, c.startedIn = ch, info, took
	c.log.Info("control plane restarted", "server", info.Server, "pid", ch.cmd.Process.Pid, "took", took.Round(time.Millisecond))
	return nil
}

// stopChild closes the child's stdin, its signal to stop, and waits for it,
// killing it after stopGrace.
func (c *ControlPlane) stopChild(ch *child) error {
	t0 := time.Now()
	ch.stdin.Close()
	select {
	case <-ch.exited:
	case <-time.After(stopGrace):
		c.log.Warn("control plane did not stop in time, killing it", "pid", ch.cmd.Process.Pid)
		ch.kill()
		return fmt.Errorf("control plane killed after %s", stopGrace)
	}
	// Whatever the child left in its group goes too.
	_ = syscall.Kill(-ch.cmd.Process.Pid, syscall.SIGKILL)
	c.log.Info("control plane stopped", "took", time.Since(t0).Round(time.Millisecond))
	if ch.waitErr != nil {
		return fmt.Errorf("control plane exit: %w: %s", ch.waitErr, TailLines(c.logPath, 10))
	}
	return nil
}

func (ch *child) kill() {
	ch.stdin.Close()
	_ = syscall.Kill(-ch.cmd.Process.Pid, syscall.SIGKILL)
	<-ch.exited
}

// TailLines returns the last n lines of a file (a log), for error
// messages.
func TailLines(path string, n int) string {
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
