// Command testworld runs a test world by hand: a real Kubernetes control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and
// one real node (a real kubelet and containerd with CRI and NRI, runc and
// the CNI plugins: package realnode), until Ctrl-C.
//
//	testworld [-dir DIR] [-node-name NAME] [-start-timeout D] [-keep]
//	testworld build-node [-crio]
//
// It first builds the real node's programs (realnode.Build: minutes the
// first time on a machine, seconds after; `testworld build-node` does only
// that, so that make can build them ahead; with -crio also what a CRI-O
// node needs, realnode.BuildCRIO). It is ready once the control
// plane answers, the node is Ready and the "default" namespace has its
// default ServiceAccount (no pod is admitted before); then it writes
// DIR/world.env (KUBECONFIG, TESTWORLD_NODE, TESTWORLD_NRI_SOCKET,
// TESTWORLD_PLUGINS_REGISTRY, TESTWORLD_PLUGINS, TESTWORLD_NODE_DIR,
// TESTWORLD_CONTAINERD_SOCKET) in one piece, for scripts to wait for and
// source. The node lives in DIR/node (its sockets, kubelet root, pod logs
// under podlogs/, the kubelet's and containerd's logs under logs/).
// At exit it removes what it created, and only that: DIR when it made it,
// else the files and folders it made in it. The node is removed whatever
// -keep says (realnode.Node.Stop: its processes, mounts, pod network
// namespaces and host paths cannot outlive the world).
//
// Build it with `make world-bin` (into _output/testworld): it needs the
// Kubernetes version ldflags (controlplane.LDFlags); realnode.Build finds
// the real node's sources with controlplane.ModuleDir (run it from the
// repository, or set TESTWORLD_SRC).
// The "control-plane" subcommand is what the controlplane package runs in
// a child process; people need not call it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/internal/cluster"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "control-plane":
			return runControlPlane(args[1:], stdout, stderr)
		case "build-node":
			return runBuildNode(args[1:], stderr)
		}
	}
	return runWorld(args, stdout, stderr)
}

// worldConfig is the flags of the world command.
type worldConfig struct {
	dir, nodeName string
	logLevel      slog.Level
	verbosity     int
	keep          bool
	startTimeout  time.Duration
}

// nodeDirMax is the longest node directory realnode.Start takes (its unix
// sockets' paths are 108 bytes at most).
const nodeDirMax = 60

// nodeDir is the real node's directory.
func (c worldConfig) nodeDir() string { return filepath.Join(c.dir, "node") }

func parseWorldFlags(args []string, stderr io.Writer) (worldConfig, error) {
	var c worldConfig
	fs := flag.NewFlagSet("testworld", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "/tmp/testworld", "working directory (control plane data, kubeconfig, the node in DIR/node: keep it short); what the world made in it is removed at exit unless -keep")
	fs.StringVar(&c.nodeName, "node-name", "testworld-node", "name of the real node")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity of the control-plane components (their log is DIR/controlplane/controlplane.log)")
	fs.BoolVar(&c.keep, "keep", false, "keep the control plane's data and world.env at exit (the node is removed all the same)")
	fs.DurationVar(&c.startTimeout, "start-timeout", 3*time.Minute, "how long the world may take to be ready once the node's programs are built")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.startTimeout <= 0 {
		return c, fmt.Errorf("-start-timeout %s: must be positive", c.startTimeout)
	}
	if len(c.nodeDir()) > nodeDirMax {
		return c, fmt.Errorf("-dir %q: too long for the node's unix sockets (%s is over %d bytes)", c.dir, c.nodeDir(), nodeDirMax)
	}
	return c, nil
}

func runWorld(args []string, stdout, stderr io.Writer) int {
	c, err := parseWorldFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: c.logLevel}))
	klog.SetSlogLogger(logger.With("component", "klog"))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if err := world(ctx, c, logger, stdout); err != nil {
		logger.Error("testworld", "err", err)
		return 1
	}
	return 0
}

func world(ctx context.Context, c worldConfig, logger *slog.Logger, stdout io.Writer) (err error) {
	var made madePaths
	if !c.keep {
		defer func() { err = errors.Join(err, made.remove()) }()
	}
	cpDir, envFile, err := c.makeDirs(&made)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	// Before the start timeout: a cold build takes minutes.
	bins, err := realnode.Build(ctx, logger)
	if err != nil {
		return fmt.Errorf("building the real node: %w", err)
	}
	// The binary is this one: the start timeout covers no build.
	startCtx, cancelStart := context.WithTimeout(ctx, c.startTimeout)
	defer cancelStart()
	cp, err := controlplane.Start(startCtx, controlplane.Options{Dir: cpDir, Logger: logger, Binary: self,
		Verbosity: c.verbosity, StartTimeout: c.startTimeout, PodAccess: true}) // the world runs as root (its node does)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.Stop()) }()

	// Stopped before the control plane (deferred after it): Stop drains
	// the node's pods through the API.
	n, err := realnode.Start(startCtx, realnode.Config{Name: c.nodeName, Dir: c.nodeDir(),
		Kubeconfig: cp.Kubeconfig(), Client: cp.Client(), Binaries: bins, Logger: logger})
	if err != nil {
		return fmt.Errorf("%w (start timeout %s)", err, c.startTimeout)
	}
	defer func() { err = errors.Join(err, n.Stop()) }()
	if err := waitDefaultServiceAccount(startCtx, cp.Client()); err != nil {
		return fmt.Errorf("%w (start timeout %s)", err, c.startTimeout)
	}
	cancelStart()

	if err := writeEnv(envFile, cp, n); err != nil {
		return err
	}
	printHints(stdout, cp, n, bins, envFile)
	select {
	case <-ctx.Done():
		logger.Info("stopping the world")
	case <-cp.Exited():
		return fmt.Errorf("the control plane exited; see %s", cp.LogPath())
	}
	return nil
}

// makeDirs makes the world's directory and its control plane's, refusing
// one a world left behind, and returns the control plane's directory and
// the env file's path (recorded in made, to be removed at the end).
func (c worldConfig) makeDirs(made *madePaths) (cpDir, envFile string, err error) {
	cpDir = filepath.Join(c.dir, "controlplane")
	envFile = filepath.Join(c.dir, "world.env")
	for _, p := range []string{cpDir, envFile, c.nodeDir()} {
		if _, err := os.Lstat(p); err == nil {
			return "", "", fmt.Errorf("%s exists (left by a world run with -keep, or by one that was killed): remove it or choose another -dir", p)
		}
	}
	for _, d := range []string{c.dir, cpDir} {
		if err := made.mkdirAll(d); err != nil {
			return "", "", err
		}
	}
	made.add(envFile)
	return cpDir, envFile, nil
}

// runBuildNode builds the real node's programs and images (realnode.Build)
// with progress lines on stderr, so that make can build them before a
// world needs them.
func runBuildNode(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("build-node", flag.ContinueOnError)
	fs.SetOutput(stderr)
	crio := fs.Bool("crio", false, "also build what a CRI-O node needs (crio, pinns, loadimage, runcclamp)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "build-node: unexpected arguments: %q\n", fs.Args())
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	fmt.Fprintln(stderr, ">> building the real node: kubelet v1.37.2, containerd v2.4.2, CNI plugins, pause and test-app images (minutes the first time, seconds after)")
	t0 := time.Now()
	bins, err := realnode.Build(ctx, logger)
	if err == nil && *crio {
		err = realnode.BuildCRIO(ctx, logger, bins)
	}
	if err != nil {
		fmt.Fprintln(stderr, "build-node:", err)
		return 1
	}
	fmt.Fprintf(stderr, ">> real node ready in %s (programs in %s, runc %s) after %s\n",
		filepath.Dir(bins.Dir), bins.Dir, bins.Runc, time.Since(t0).Round(100*time.Millisecond))
	return 0
}

// waitDefaultServiceAccount waits for the ServiceAccount "default" in the
// namespace "default": the apiserver admits no pod before it exists.
func waitDefaultServiceAccount(ctx context.Context, c kubernetes.Interface) error {
	err := wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, err := c.CoreV1().ServiceAccounts(metav1.NamespaceDefault).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the default ServiceAccount in namespace default: %w", err)
	}
	return nil
}

// madePaths records the files and folders the world creates, to remove
// those and nothing else at exit.
type madePaths struct{ paths []string }

// mkdirAll is os.MkdirAll that records the topmost folder it created.
func (m *madePaths) mkdirAll(dir string) error {
	dir = filepath.Clean(dir)
	top := ""
	for d := dir; ; d = filepath.Dir(d) {
		_, err := os.Lstat(d)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("creating %s: %w", dir, err)
		}
		top = d
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if top != "" {
		m.add(top)
	}
	return nil
}

// add records paths that did not exist and that the world will create.
func (m *madePaths) add(paths ...string) { m.paths = append(m.paths, paths...) }

// remove removes what was recorded, the last first. Paths already gone
// are fine.
func (m *madePaths) remove() error {
	var errs []error
	for i := len(m.paths) - 1; i >= 0; i-- {
		if err := os.RemoveAll(m.paths[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// writeEnv writes the world's coordinates as shell variables, for scripts
// such as make dev to source. The file appears whole (written aside, then
// renamed): its presence means the world is ready.
func writeEnv(path string, cp *controlplane.ControlPlane, n *realnode.Node) error {
	var b strings.Builder
	for _, kv := range [][2]string{
		{"KUBECONFIG", cp.Kubeconfig()},
		{"TESTWORLD_NODE", n.Name()},
		{"TESTWORLD_NRI_SOCKET", n.NRISocket()},
		{"TESTWORLD_PLUGINS_REGISTRY", n.RegistryDir()},
		{"TESTWORLD_PLUGINS", n.PluginsDir()},
		{"TESTWORLD_NODE_DIR", n.Dir()},
		{"TESTWORLD_CONTAINERD_SOCKET", n.ContainerdSocket()},
	} {
		fmt.Fprintf(&b, "%s=%s\n", kv[0], kv[1])
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func printHints(w io.Writer, cp *controlplane.ControlPlane, n *realnode.Node, bins *realnode.Binaries, envFile string) {
	var b strings.Builder
	pki := filepath.Join(filepath.Dir(cp.Kubeconfig()), "pki")
	fmt.Fprintf(&b, "\nThe test world is up (control plane ready in %s).\n\n", cp.StartedIn().Round(100*time.Millisecond))
	fmt.Fprintf(&b, "  kubeconfig          %s\n", cp.Kubeconfig())
	fmt.Fprintf(&b, "  apiserver           %s\n", cp.Server())
	fmt.Fprintf(&b, "  node                %s   (a real kubelet and containerd; everything of it under %s)\n", n.Name(), n.Dir())
	fmt.Fprintf(&b, "  kubelet log         %s\n", n.LogPath("kubelet"))
	fmt.Fprintf(&b, "  containerd log      %s\n", n.LogPath("containerd"))
	fmt.Fprintf(&b, "  containerd socket   %s   (CRI too)\n", n.ContainerdSocket())
	fmt.Fprintf(&b, "  NRI socket          %s   (NRI plugins connect here)\n", n.NRISocket())
	fmt.Fprintf(&b, "  plugins registry    %s   (DRA drivers register here)\n", n.RegistryDir())
	fmt.Fprintf(&b, "  plugins dir         %s\n", n.PluginsDir())
	fmt.Fprintf(&b, "  CDI dir             %s\n", n.CDIDir())
	fmt.Fprintf(&b, "  pod logs            %s/<namespace>_<pod>_<uid>/<container>/0.log\n", filepath.Join(n.Dir(), "podlogs"))
	fmt.Fprintf(&b, "  all of the above    %s\n", envFile)
	fmt.Fprintf(&b, "  control plane logs  %s\n\n", cp.LogPath())
	fmt.Fprintf(&b, "Look around:\n")
	fmt.Fprintf(&b, "  export KUBECONFIG=%s; kubectl get nodes   (if kubectl is installed)\n", cp.Kubeconfig())
	fmt.Fprintf(&b, "  curl --cacert %s --cert %s --key %s %s/api/v1/nodes\n",
		filepath.Join(pki, "ca.crt"), filepath.Join(pki, "client-admin.crt"), filepath.Join(pki, "client-admin.key"), cp.Server())
	fmt.Fprintf(&b, "  %s --address %s -n k8s.io containers ls\n", bins.Ctr(), n.ContainerdSocket())
	fmt.Fprintf(&b, "  tail -f %s\n", n.LogPath("kubelet"))
	fmt.Fprintf(&b, "  ip netns list   (the pods' network namespaces, made by containerd)\n")
	fmt.Fprintf(&b, "\nRunning until Ctrl-C.\n")
	fmt.Fprint(w, b.String())
}

// runControlPlane is the child process of controlplane.Start: it runs the
// components in-process, prints their Info as one JSON line on stdout when
// ready, and stops when stdin closes or on SIGTERM/SIGINT.
func runControlPlane(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("control-plane", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "working directory (must exist)")
	verbosity := fs.Int("v", 0, "klog verbosity of the components")
	podAccess := fs.Bool("pod-access", false, "make the kubernetes Service's ClusterIP answer on this host, for pods of a real node (root)")
	componentQPS := fs.Float64("component-qps", 0, "the controller-manager's and scheduler's apiserver client rate, burst twice that; 0 keeps their defaults")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *dir == "" {
		fmt.Fprintln(stderr, "control-plane: -dir is required")
		return 2
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil)).With("component", "testworld")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		logger.Info("stdin closed: stopping")
		cancel()
		time.AfterFunc(30*time.Second, func() {
			logger.Error("still running 30s after stdin closed: exiting")
			os.Exit(3)
		})
	}()
	err := cluster.Run(ctx, cluster.Config{Dir: *dir, Verbosity: *verbosity, Logger: logger, PodAccess: *podAccess, ComponentQPS: *componentQPS}, func(info cluster.Info) {
		b, _ := json.Marshal(controlplane.Info(info))
		fmt.Fprintf(stdout, "%s\n", b)
	})
	if err != nil {
		logger.Error("control plane", "err", err)
		return 1
	}
	logger.Info("control plane stopped")
	return 0
}
