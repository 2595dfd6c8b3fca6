// Command devdemo is `make dev`: netdra's whole job on this machine. As
// root it
//
//   - creates demo veth pairs (ndemo0, ndemo1, ...; peers <name>p) for the
//     provisioner's host manager to offer,
//   - starts the test world (testworld binary: a control plane and a real
//     node, a real kubelet and containerd with NRI, in DIR/world/node) and
//     netdra's four node processes — state, provisioner, nri, dra — as
//     separate processes with their sockets and logs in one folder,
//   - applies the CRDs, a NodeConfig, a DeviceClass, a ResourceClaimTemplate
//     (net1, a MAC, an MTU, an IPv4 and an IPv6 address, a route) and a Pod
//     whose container (the real node's test app) prints what it sees of
//     its network,
//   - shows the pod Running, the container's own log (net1 with the
//     claim's MAC, MTU, addresses and route, as the container sees them),
//     its network namespace (from containerd), the claim's status, and how
//     to look further (kubectl, one grpcurl per socket),
//   - runs until Ctrl-C (or, with -oneshot, checks what it showed and
//     goes on), then removes everything it made: the pod (its device goes
//     back to the host), the processes, the world with its node, the
//     links, the folder. It checks that nothing is left — no process, mount
//     or file under the folder, no pod network namespace, no demo link —
//     and fails when something is.
//
// Every step checks its inputs first; a failure part-way, or a child that
// dies while it runs, removes what was made up to then. It exits 0 after a
// Ctrl-C (or a -oneshot run) when everything was shown, checked and
// removed; 1 otherwise, saying what failed or was left; 2 for bad flags.
//
//	devdemo -bin DIR -testworld BIN -grpcurl BIN -crds DIR [-dir DIR] [-oneshot]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is devdemo's flags.
type config struct {
	dir        string // sockets, logs, state.db, the world's folder
	binDir     string // state, provisioner, nri, dra, netdra-hook
	testworld  string // the testworld binary
	grpcurl    string
	crds       string // pods/chart/netdra/files/crds
	nodeName   string
	linkPrefix string // of the demo links
	devices    int
	hostNetns  string // a named netns standing in for the host's; "" = the host's own
	draMetrics string
	nriMetrics string
	oneshot    bool
	timeout    time.Duration // bounds each wait
}

// ifNameMax is the longest kernel interface name (IFNAMSIZ - 1).
const ifNameMax = 15

// nodeDirMax is the longest directory the real node takes
// (realnode.Start): its unix sockets' paths are 108 bytes at most.
const nodeDirMax = 60

var (
	linkPrefixRE = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	netnsNameRE  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	dnsLabelRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
)

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("devdemo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.dir, "dir", "/tmp/netdra-dev", "folder for the sockets, logs and state (created; must be absent or empty; removed at exit)")
	fs.StringVar(&c.binDir, "bin", "", "folder holding the state, provisioner, nri, dra and netdra-hook binaries (required)")
	fs.StringVar(&c.testworld, "testworld", "", "the testworld binary (required; make world-bin)")
	fs.StringVar(&c.grpcurl, "grpcurl", "", "the grpcurl binary (required)")
	fs.StringVar(&c.crds, "crds", "", "folder of netdra's CRDs, pods/chart/netdra/files/crds (required)")
	fs.StringVar(&c.nodeName, "node-name", "netdra-dev", "name of the real node")
	fs.StringVar(&c.linkPrefix, "link-prefix", "ndemo", "prefix of the demo veth names (<prefix>0, <prefix>0p, ...)")
	fs.IntVar(&c.devices, "devices", 2, "how many demo veth pairs to create")
	fs.StringVar(&c.hostNetns, "host-netns", "", "run the provisioner and the demo links in this named netns, created and deleted here (default: the host's own)")
	fs.StringVar(&c.draMetrics, "dra-metrics", "127.0.0.1:9651", "dra's metrics address (empty: none)")
	fs.StringVar(&c.nriMetrics, "nri-metrics", "127.0.0.1:9652", "nri's metrics address (empty: none)")
	fs.BoolVar(&c.oneshot, "oneshot", false, "check what is shown, clean up and exit instead of running until Ctrl-C")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Minute, "how long each step may take")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return c, c.validate()
}

func (c *config) validate() error {
	for _, f := range []struct{ name, val string }{
		{"-bin", c.binDir}, {"-testworld", c.testworld}, {"-grpcurl", c.grpcurl}, {"-crds", c.crds}, {"-dir", c.dir},
	} {
		if f.val == "" {
			return fmt.Errorf("%s is required", f.name)
		}
	}
	var err error
	for _, p := range []*string{&c.dir, &c.binDir, &c.testworld, &c.grpcurl, &c.crds} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	switch {
	case c.devices < 1 || c.devices > 9:
		return fmt.Errorf("-devices %d: want 1 to 9", c.devices)
	case !linkPrefixRE.MatchString(c.linkPrefix) || len(c.linkPrefix)+2 > ifNameMax:
		return fmt.Errorf("-link-prefix %q: want lower-case letters and digits, starting with a letter, at most %d characters", c.linkPrefix, ifNameMax-2)
	case c.hostNetns != "" && !netnsNameRE.MatchString(c.hostNetns):
		return fmt.Errorf("-host-netns %q: want letters, digits, '_', '.' and '-'", c.hostNetns)
	case !dnsLabelRE.MatchString(c.nodeName) || len(c.nodeName) > 63:
		return fmt.Errorf("-node-name %q: want a DNS label", c.nodeName)
	case c.timeout <= 0:
		return fmt.Errorf("-timeout %s: must be positive", c.timeout)
	}
	// The real node's sockets are under its folder, the longest the
	// registration socket of the dra plugin.
	if node := c.nodeDir(); len(node) > nodeDirMax {
		return fmt.Errorf("-dir %q: too long for unix socket paths (the real node's folder %s is over %d bytes)", c.dir, node, nodeDirMax)
	}
	return nil
}

// worldDir is the test world's folder, nodeDir its real node's.
func (c *config) worldDir() string { return filepath.Join(c.dir, "world") }
func (c *config) nodeDir() string  { return filepath.Join(c.worldDir(), "node") }

// links returns the demo links: name and peer of each pair.
func (c *config) links() [][2]string {
	var out [][2]string
	for i := range c.devices {
		name := fmt.Sprintf("%s%d", c.linkPrefix, i)
		out = append(out, [2]string{name, name + "p"})
	}
	return out
}

func run(args []string, stdout, stderr io.Writer) int {
	c, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "devdemo:", err)
		return 2
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel()
		for range sigs {
			fmt.Fprintln(stdout, ">> still cleaning up; it ends by itself (each step is bounded)")
		}
	}()
	d := newDemo(c, stdout)
	err = d.run(ctx)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		if c.oneshot {
			err = errors.New("interrupted")
		} else {
			err = nil // Ctrl-C is how it ends
		}
	}
	err = errors.Join(err, d.cleanup())
	err = errors.Join(err, d.checkNothingLeft())
	if err != nil {
		fmt.Fprintln(stderr, "devdemo:", err)
		return 1
	}
	fmt.Fprintf(stdout, ">> stopped: the pod, the processes, the real node, the demo links and %s are gone\n", c.dir)
	return 0
}
