// Command testworld runs a test world by hand: a real Kubernetes control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and
// one emulated node (kubelet plugin registration and DRA, the NRI runtime
// side, a network namespace per pod), until Ctrl-C.
//
//	testworld [-dir DIR] [-node-name NAME] [-nri-socket PATH]
//	          [-plugins-registry DIR] [-plugins DIR] [-netns-prefix P]
//	          [-start-timeout D] [-keep]
//
// It is ready once the control plane answers, the node is Ready and the
// "default" namespace has its default ServiceAccount (no pod is admitted
// before); then it writes DIR/world.env (KUBECONFIG, TESTWORLD_NODE,
// TESTWORLD_NRI_SOCKET, TESTWORLD_PLUGINS_REGISTRY, TESTWORLD_PLUGINS,
// TESTWORLD_NETNS_PREFIX) in one piece, for scripts to wait for and source.
// At exit it removes what it created, and only that: DIR when it made it,
// else the files and folders it made in it.
//
// Build it with `make world-bin` (into _output/testworld): it needs the
// Kubernetes version ldflags (controlplane.LDFlags).
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

	"github.com/netdra/netdra/shared/testworld/controlplane"
	"github.com/netdra/netdra/shared/testworld/internal/cluster"
	"github.com/netdra/netdra/shared/testworld/node"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "control-plane" {
		return runControlPlane(args[1:], stdout, stderr)
	}
	return runWorld(args, stdout, stderr)
}

// worldConfig is the flags of the world command.
type worldConfig struct {
	dir, nodeName, nriSocket, registry, plugins, netnsPrefix string
	logLevel                                                 slog.Level
	verbosity                                                int
	keep                                                     bool
	startTimeout                                             time.Duration
}

func parseWorldFlags(args []string, stderr io.Writer) (worldConfig, error) {
	var c worldConfig
	fs := flag.NewFlagSet("testworld", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "/tmp/testworld", "working directory (control plane data, kubeconfig, sockets); what the world made in it is removed at exit unless -keep")
	fs.StringVar(&c.nodeName, "node-name", "testworld-node", "name of the emulated node")
	fs.StringVar(&c.nriSocket, "nri-socket", "", "NRI socket the runtime side listens on (default DIR/nri.sock)")
	fs.StringVar(&c.registry, "plugins-registry", "", "kubelet plugin registration directory (default DIR/plugins_registry)")
	fs.StringVar(&c.plugins, "plugins", "", "kubelet plugins directory, created for DRA drivers' sockets (default DIR/plugins)")
	fs.StringVar(&c.netnsPrefix, "netns-prefix", "testworld-", "prefix of the pods' network namespace names")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity of the control-plane components (their log is DIR/controlplane/controlplane.log)")
	fs.BoolVar(&c.keep, "keep", false, "keep what the world made at exit")
	fs.DurationVar(&c.startTimeout, "start-timeout", 3*time.Minute, "how long the world may take to be ready (the binary is built already)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	if c.startTimeout <= 0 {
		return c, fmt.Errorf("-start-timeout %s: must be positive", c.startTimeout)
	}
	if c.nriSocket == "" {
		c.nriSocket = filepath.Join(c.dir, "nri.sock")
	}
	if c.registry == "" {
		c.registry = filepath.Join(c.dir, "plugins_registry")
	}
	if c.plugins == "" {
		c.plugins = filepath.Join(c.dir, "plugins")
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
	cpDir := filepath.Join(c.dir, "controlplane")
	envFile := filepath.Join(c.dir, "world.env")
	for _, p := range []string{cpDir, envFile, c.nriSocket} {
		if _, err := os.Lstat(p); err == nil {
			return fmt.Errorf("%s exists (left by a world run with -keep, or by one that was killed): remove it or choose another -dir", p)
		}
	}
	for _, d := range []string{c.dir, cpDir, c.registry, c.plugins, filepath.Dir(c.nriSocket)} {
		if err := made.mkdirAll(d); err != nil {
			return err
		}
	}
	made.add(c.nriSocket, envFile)
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	// The binary is this one: the start timeout covers no build.
	startCtx, cancelStart := context.WithTimeout(ctx, c.startTimeout)
	defer cancelStart()
	cp, err := controlplane.Start(startCtx, controlplane.Options{Dir: cpDir, Logger: logger, Binary: self,
		Verbosity: c.verbosity, StartTimeout: c.startTimeout})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cp.Stop()) }()

	n, err := node.Start(ctx, node.Config{
		Client: cp.Client(), NodeName: c.nodeName, RegistryDir: c.registry,
		NRISocket: c.nriSocket, NetnsPrefix: c.netnsPrefix, Logger: logger,
	})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, n.Stop()) }()
	if err := waitDefaultServiceAccount(startCtx, cp.Client()); err != nil {
		return fmt.Errorf("%w (start timeout %s)", err, c.startTimeout)
	}
	cancelStart()

	if err := writeEnv(envFile, c, cp); err != nil {
		return err
	}
	printHints(stdout, c, cp, envFile)
	select {
	case <-ctx.Done():
		logger.Info("stopping the world")
	case <-cp.Exited():
		return fmt.Errorf("the control plane exited; see %s", cp.LogPath())
	}
	return nil
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
func writeEnv(path string, c worldConfig, cp *controlplane.ControlPlane) error {
	env := fmt.Sprintf("KUBECONFIG=%s\nTESTWORLD_NODE=%s\nTESTWORLD_NRI_SOCKET=%s\nTESTWORLD_PLUGINS_REGISTRY=%s\nTESTWORLD_PLUGINS=%s\nTESTWORLD_NETNS_PREFIX=%s\n",
		cp.Kubeconfig(), c.nodeName, c.nriSocket, c.registry, c.plugins, c.netnsPrefix)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(env), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func printHints(w io.Writer, c worldConfig, cp *controlplane.ControlPlane, envFile string) {
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe test world is up (control plane ready in %s).\n\n", cp.StartedIn().Round(100*time.Millisecond))
	fmt.Fprintf(&b, "  kubeconfig        %s\n", cp.Kubeconfig())
	fmt.Fprintf(&b, "  apiserver         %s\n", cp.Server())
	fmt.Fprintf(&b, "  node              %s\n", c.nodeName)
	fmt.Fprintf(&b, "  plugins registry  %s   (DRA drivers register here)\n", c.registry)
	fmt.Fprintf(&b, "  plugins dir       %s\n", c.plugins)
	fmt.Fprintf(&b, "  NRI socket        %s   (NRI plugins connect here)\n", c.nriSocket)
	fmt.Fprintf(&b, "  pod netns         /var/run/netns/%s<pod UID>\n", c.netnsPrefix)
	fmt.Fprintf(&b, "  all of the above  %s\n", envFile)
	fmt.Fprintf(&b, "  component logs    %s\n\n", cp.LogPath())
	fmt.Fprintf(&b, "Look around:\n")
	fmt.Fprintf(&b, "  export KUBECONFIG=%s; kubectl get nodes   (if kubectl is installed)\n", cp.Kubeconfig())
	fmt.Fprintf(&b, "  curl --cacert %s --cert %s --key %s %s/api/v1/nodes\n",
		filepath.Join(filepath.Dir(cp.Kubeconfig()), "pki", "ca.crt"),
		filepath.Join(filepath.Dir(cp.Kubeconfig()), "pki", "client-admin.crt"),
		filepath.Join(filepath.Dir(cp.Kubeconfig()), "pki", "client-admin.key"), cp.Server())
	fmt.Fprintf(&b, "  ip netns list\n")
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
	err := cluster.Run(ctx, cluster.Config{Dir: *dir, Verbosity: *verbosity, Logger: logger}, func(info cluster.Info) {
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
