// Command testworld runs a test world by hand: a real Kubernetes control
// plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler) and
// one emulated node (kubelet plugin registration and DRA, the NRI runtime
// side, a network namespace per pod), until Ctrl-C.
//
//	testworld [-dir DIR] [-node-name NAME] [-nri-socket PATH]
//	          [-plugins-registry DIR] [-plugins DIR]
//
// Build it with `make world`: it needs the Kubernetes version ldflags.
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
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

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
}

func parseWorldFlags(args []string, stderr io.Writer) (worldConfig, error) {
	var c worldConfig
	fs := flag.NewFlagSet("testworld", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "/tmp/testworld", "working directory (control plane data, kubeconfig, sockets); emptied at exit unless -keep")
	fs.StringVar(&c.nodeName, "node-name", "testworld-node", "name of the emulated node")
	fs.StringVar(&c.nriSocket, "nri-socket", "", "NRI socket the runtime side listens on (default DIR/nri.sock)")
	fs.StringVar(&c.registry, "plugins-registry", "", "kubelet plugin registration directory (default DIR/plugins_registry)")
	fs.StringVar(&c.plugins, "plugins", "", "kubelet plugins directory, created for DRA drivers' sockets (default DIR/plugins)")
	fs.StringVar(&c.netnsPrefix, "netns-prefix", "testworld-", "prefix of the pods' network namespace names")
	fs.TextVar(&c.logLevel, "log-level", slog.LevelInfo, "log level: debug, info, warn, error")
	fs.IntVar(&c.verbosity, "v", 0, "klog verbosity of the control-plane components (their log is DIR/controlplane/controlplane.log)")
	fs.BoolVar(&c.keep, "keep", false, "keep DIR at exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
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
	cpDir := filepath.Join(c.dir, "controlplane")
	if err := os.RemoveAll(cpDir); err != nil {
		return fmt.Errorf("clearing %s: %w", cpDir, err)
	}
	for _, d := range []string{cpDir, c.registry, c.plugins, filepath.Dir(c.nriSocket)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if !c.keep {
		defer func() { err = errors.Join(err, os.RemoveAll(c.dir)) }()
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding this binary: %w", err)
	}
	cp, err := controlplane.Start(ctx, controlplane.Options{Dir: cpDir, Logger: logger, Binary: self, Verbosity: c.verbosity})
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

	envFile := filepath.Join(c.dir, "world.env")
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

// writeEnv writes the world's coordinates as shell variables, for scripts
// such as make dev to source.
func writeEnv(path string, c worldConfig, cp *controlplane.ControlPlane) error {
	env := fmt.Sprintf("KUBECONFIG=%s\nTESTWORLD_NODE=%s\nTESTWORLD_NRI_SOCKET=%s\nTESTWORLD_PLUGINS_REGISTRY=%s\nTESTWORLD_PLUGINS=%s\nTESTWORLD_NETNS_PREFIX=%s\n",
		cp.Kubeconfig(), c.nodeName, c.nriSocket, c.registry, c.plugins, c.netnsPrefix)
	if err := os.WriteFile(path, []byte(env), 0o644); err != nil {
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
