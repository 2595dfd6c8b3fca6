package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/netdra/netdra/shared/rpc"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/realnode"
)

// The node processes, in start order.
var nodeProcesses = []string{"state", "provisioner", "nri", "dra"}

// demo is one run: what it made, to remove at exit, and what it learned.
type demo struct {
	c    config
	out  io.Writer
	undo []undoStep

	world   *proc
	procs   map[string]*proc
	env     map[string]string // world.env
	restCfg *rest.Config
	client  kubernetes.Interface
	dyn     dynamic.Interface
	// The running pod's: its network namespace as containerd made it (a
	// name under /var/run/netns), its container's log and the first dump
	// the container printed of its network.
	podNetns, podLog, podView string
	// madeAny is set once preflight passed: from then on, things are made.
	madeAny bool
	// bpfBefore is what netdra had pinned on the host's bpffs before.
	bpfBefore []string
}

type undoStep struct {
	what string
	fn   func() error
}

func newDemo(c config, out io.Writer) *demo {
	return &demo{c: c, out: out, procs: map[string]*proc{}}
}

// say prints a progress line.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, ">> "+format+"\n", args...)
}

// onExit records how to undo what was just made; cleanup runs the steps,
// the last first.
func (d *demo) onExit(what string, fn func() error) {
	d.undo = append(d.undo, undoStep{what, fn})
}

// cleanup undoes everything, the last made first, going on past failures.
func (d *demo) cleanup() error {
	var errs []error
	for i := len(d.undo) - 1; i >= 0; i-- {
		s := d.undo[i]
		if err := s.fn(); err != nil {
			d.say("cleaning up: %s: %v", s.what, err)
			errs = append(errs, fmt.Errorf("%s: %w", s.what, err))
		}
	}
	d.undo = nil
	return errors.Join(errs...)
}

// run makes everything, shows it and, unless oneshot, waits for ctx to end.
func (d *demo) run(ctx context.Context) error {
	for _, step := range []func(context.Context) error{
		d.preflight, d.makeDir, d.makeLinks, d.startWorld, d.startNodeProcesses,
		d.connect, d.applyConfig, d.waitDriver, d.createPod, d.waitPod, d.show,
	} {
		if err := step(ctx); err != nil {
			return err
		}
		d.madeAny = true
	}
	if d.c.oneshot {
		d.say("oneshot: the pod runs with net1 as configured and every command above works; cleaning up")
		return nil
	}
	fmt.Fprint(d.out, "\nRunning until Ctrl-C.\n")
	if p := d.waitExit(ctx); p != nil {
		p.told = true
		return fmt.Errorf("%s exited while running: %v\n%s", p.name, p.waitErr, controlplane.TailLines(p.logPath, 20))
	}
	fmt.Fprintln(d.out)
	d.say("Ctrl-C: cleaning up")
	return nil
}

// waitExit waits for ctx to end (nil) or a child to exit (that child).
func (d *demo) waitExit(ctx context.Context) *proc {
	exited := make(chan *proc, len(d.procs)+1)
	for _, p := range append([]*proc{d.world}, d.procList()...) {
		go func() {
			select {
			case <-p.exited:
				exited <- p
			case <-ctx.Done():
			}
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case p := <-exited:
		return p
	}
}

// procList is the node processes in start order.
func (d *demo) procList() []*proc {
	var out []*proc
	for _, n := range nodeProcesses {
		if p := d.procs[n]; p != nil {
			out = append(out, p)
		}
	}
	return out
}

// preflight checks everything it can before anything is made.
func (d *demo) preflight(context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("make dev needs root: it creates network namespaces and links, and runs the privileged provisioner")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("the ip command (iproute2) is needed: %w", err)
	}
	bins := []string{d.c.testworld, d.c.grpcurl}
	for _, n := range append(nodeProcesses, "netdra-hook") { // the containers' gate hook
		bins = append(bins, filepath.Join(d.c.binDir, n))
	}
	for _, b := range bins {
		if fi, err := os.Stat(b); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%s is not an executable (make build world-bin tools builds them): %v", b, err)
		}
	}
	if crds, _ := filepath.Glob(filepath.Join(d.c.crds, "netdra.io_*.yaml")); len(crds) == 0 {
		return fmt.Errorf("no netdra.io_*.yaml CRDs in %s", d.c.crds)
	}
	if entries, err := os.ReadDir(d.c.dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty (left by a make dev that was killed?): look at it, remove it (rm -rf %s) and start again", d.c.dir, d.c.dir)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if pids := processesUnder(d.c.dir); len(pids) > 0 {
		return fmt.Errorf("processes with %s in their command line run (a real node's, left by a make dev that was killed?): %v; stop them and start again", d.c.dir, pids)
	}
	if d.c.hostNetns != "" && netnsExists(d.c.hostNetns) {
		return fmt.Errorf("network namespace %s exists already: remove it (ip netns del %s) or choose another -host-netns", d.c.hostNetns, d.c.hostNetns)
	}
	if d.c.hostNetns == "" {
		for _, l := range d.c.links() {
			for _, name := range l {
				if d.ip("link", "show", name) == nil {
					return fmt.Errorf("link %s exists already (left by a make dev that was killed?): remove it (ip link del %s) or choose another -link-prefix", name, name)
				}
			}
		}
	}
	d.bpfBefore = bpfPins()
	return nil
}

// makeDir creates the folder, or takes an empty one, removed at exit.
func (d *demo) makeDir(context.Context) error {
	dir := d.c.dir
	if _, err := os.Stat(dir); err == nil {
		// Empty (checked): everything in it at exit is ours.
		d.onExit("emptying "+dir, func() error {
			entries, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			var errs []error
			for _, e := range entries {
				errs = append(errs, os.RemoveAll(filepath.Join(dir, e.Name())))
			}
			return errors.Join(errs...)
		})
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	d.onExit("removing "+dir, func() error { return os.RemoveAll(dir) })
	return nil
}

// makeLinks creates the demo veth pairs (in -host-netns, made here, when
// set).
func (d *demo) makeLinks(context.Context) error {
	if ns := d.c.hostNetns; ns != "" {
		if err := d.ipHost("netns", "add", ns); err != nil {
			return err
		}
		d.onExit("removing network namespace "+ns, func() error { return d.ipHost("netns", "del", ns) })
	}
	var names []string
	for i, l := range d.c.links() {
		if err := d.ip("link", "add", l[0], "address", demoMAC(i), "mtu", strconv.Itoa(demoMTU),
			"type", "veth", "peer", "name", l[1]); err != nil {
			return err
		}
		d.onExit("removing link "+l[0], func() error {
			if d.ip("link", "show", l[0]) != nil {
				return nil // gone with its pair
			}
			return d.ip("link", "del", l[0])
		})
		// The peer up: net1 in the pod has a carrier.
		if err := d.ip("link", "set", l[1], "up"); err != nil {
			return err
		}
		names = append(names, fmt.Sprintf("%s (peer %s)", l[0], l[1]))
	}
	where := "the host netns"
	if d.c.hostNetns != "" {
		where = "netns " + d.c.hostNetns + ", standing in for the host's"
	}
	d.say("demo devices: veth %s in %s", strings.Join(names, ", "), where)
	return nil
}

// worldEnv are the keys world.env must have.
var worldEnv = []string{"KUBECONFIG", "TESTWORLD_NODE", "TESTWORLD_NRI_SOCKET", "TESTWORLD_PLUGINS_REGISTRY",
	"TESTWORLD_PLUGINS", "TESTWORLD_NODE_DIR", "TESTWORLD_CONTAINERD_SOCKET"}

// worldStopGrace bounds the world's stop: the real node drains its pods
// (a minute at most when a pod cannot be torn down), then stops the
// kubelet and containerd (half a minute each at most) and cleans up.
const worldStopGrace = 3 * time.Minute

// worldStartBound is how long, beyond the step timeout, the test world may
// take to write world.env. testworld bounds its world's start itself
// (-start-timeout, the step timeout) and exits when it fails; before that
// it builds the real node's programs, which takes minutes the first time
// and waits for any other build of the same cache, so this bound only
// catches a testworld that hangs.
const worldStartBound = 20 * time.Minute

// startWorld starts the testworld binary and waits for its world.env.
func (d *demo) startWorld(ctx context.Context) error {
	logPath := filepath.Join(d.c.dir, "world.log")
	d.say("starting the test world: Kubernetes v1.37.2 control plane, real node %s (kubelet v1.37.2, containerd v2.4.2 with NRI, runc) in %s (log %s)",
		d.c.nodeName, d.c.nodeDir(), logPath)
	t0 := time.Now()
	p, err := startProc("testworld", logPath, d.c.testworld, "-dir", d.c.worldDir(), "-node-name", d.c.nodeName,
		"-start-timeout", d.c.timeout.String())
	if err != nil {
		return err
	}
	d.world = p
	// After the world stopped: what its node could not remove.
	d.onExit("removing what the real node left", d.removeNodeLeftovers)
	d.onExit("stopping the test world", func() error { return p.stop(worldStopGrace) })
	envPath := filepath.Join(d.c.worldDir(), "world.env")
	err = p.waitUntil(ctx, "world.env (the world ready)", worldStartBound+d.c.timeout, func(context.Context) (bool, error) {
		env, err := readEnv(envPath)
		if err != nil {
			return false, err
		}
		d.env = env
		return true, nil
	})
	if err != nil {
		return err
	}
	for _, k := range worldEnv {
		if d.env[k] == "" {
			return fmt.Errorf("%s has no %s", envPath, k)
		}
	}
	d.say("test world up in %s (coordinates in %s)", time.Since(t0).Round(100*time.Millisecond), envPath)
	return nil
}

// readEnv reads KEY=value lines.
func readEnv(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

func (d *demo) socket(name string) string { return filepath.Join(d.c.dir, name+".sock") }

// nodeArgs are each node process's flags besides -socket.
func (d *demo) nodeArgs(name string) []string {
	peers := []string{"-state-socket", d.socket("state"), "-provisioner-socket", d.socket("provisioner")}
	switch name {
	case "state":
		return []string{"-db", filepath.Join(d.c.dir, "state.db")}
	case "nri":
		return append(peers, "-nri-socket", d.env["TESTWORLD_NRI_SOCKET"], "-metrics-address", d.c.nriMetrics,
			"-gate-hook", filepath.Join(d.c.binDir, "netdra-hook"), "-gate-socket", d.socket("nri-gate"))
	case "dra":
		return append(peers, "-node-name", d.env["TESTWORLD_NODE"], "-kubeconfig", d.env["KUBECONFIG"],
			"-plugin-dir", d.env["TESTWORLD_PLUGINS"], "-registrar-dir", d.env["TESTWORLD_PLUGINS_REGISTRY"],
			"-cdi-dir", filepath.Join(d.env["TESTWORLD_NODE_DIR"], "cdi"), "-metrics-address", d.c.draMetrics,
			"-netns-hook", filepath.Join(d.c.binDir, "netdra-hook"), "-gate-socket", d.socket("nri-gate"))
	}
	return nil
}

// startNodeProcesses starts state, provisioner, nri and dra, each waited
// for until it answers its health check.
func (d *demo) startNodeProcesses(ctx context.Context) error {
	for _, name := range nodeProcesses {
		argv := append([]string{filepath.Join(d.c.binDir, name), "-socket", d.socket(name)}, d.nodeArgs(name)...)
		if name == "provisioner" && d.c.hostNetns != "" {
			argv = append([]string{"ip", "netns", "exec", d.c.hostNetns}, argv...)
		}
		logPath := filepath.Join(d.c.dir, name+".log")
		p, err := startProc(name, logPath, argv...)
		if err != nil {
			return err
		}
		d.procs[name] = p
		d.onExit("stopping "+name, func() error { return p.stop(20 * time.Second) })
		err = p.waitUntil(ctx, "health", d.c.timeout, func(ctx context.Context) (bool, error) {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			err := rpc.CheckHealth(cctx, d.socket(name), "")
			return err == nil, err
		})
		if err != nil {
			return err
		}
		d.say("%-11s pid %-7d serving on %s (log %s)", name, p.pid(), d.socket(name), logPath)
	}
	return nil
}

// The demo links' own MAC and MTU, which they must have again when the
// pod is gone.
const demoMTU = 1500

func demoMAC(i int) string { return fmt.Sprintf("02:00:00:00:de:%02x", i) }

// hostLink reads a link in the host netns (or -host-netns).
func (d *demo) hostLink(name string) (ipLink, error) {
	args := []string{"-j", "link", "show", "dev", name}
	if d.c.hostNetns != "" {
		args = append([]string{"-n", d.c.hostNetns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return ipLink{}, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	var links []ipLink
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return ipLink{}, fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return links[0], nil
}

// ip runs the ip command in the host netns (or -host-netns).
func (d *demo) ip(args ...string) error {
	if d.c.hostNetns != "" {
		args = append([]string{"-n", d.c.hostNetns}, args...)
	}
	return d.ipHost(args...)
}

// ipHost runs the ip command in devdemo's own netns.
func (d *demo) ipHost(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// netnsDir is where `ip netns` keeps named network namespaces.
const netnsDir = "/var/run/netns"

func netnsExists(name string) bool {
	_, err := os.Stat(filepath.Join(netnsDir, name))
	return err == nil
}

// removeNodeLeftovers removes what the real node left after the world
// stopped: processes naming the folder (a shim, the kubelet), mounts under
// it, the pod's network namespace. The world removes all of it itself when
// it stops, so anything found is reported.
func (d *demo) removeNodeLeftovers() error {
	var errs []error
	if pids := processesUnder(d.c.dir); len(pids) > 0 {
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		errs = append(errs, fmt.Errorf("the test world left processes naming %s: %v (killed now)", d.c.dir, pids))
	}
	if mounts := realnode.MountsUnder(d.c.dir); len(mounts) > 0 {
		for _, m := range mounts {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
			}
		}
		errs = append(errs, fmt.Errorf("the test world left mounts %s (unmounted now)", strings.Join(mounts, " ")))
	}
	if d.podNetns != "" && netnsExists(d.podNetns) {
		errs = append(errs, d.ipHost("netns", "del", d.podNetns),
			fmt.Errorf("the test world left the pod's network namespace %s (removed now)", d.podNetns))
	}
	return errors.Join(errs...)
}

// checkNothingLeft checks, after cleanup, that nothing devdemo made is
// still there.
func (d *demo) checkNothingLeft() error {
	if !d.madeAny {
		return nil // refused before making anything: what is there is not ours
	}
	var errs []error
	if _, err := os.Lstat(d.c.nodeDir()); err == nil {
		errs = append(errs, fmt.Errorf("the real node's folder %s left", d.c.nodeDir()))
	}
	if mounts := realnode.MountsUnder(d.c.dir); len(mounts) > 0 {
		errs = append(errs, fmt.Errorf("mounts left under %s: %s", d.c.dir, strings.Join(mounts, " ")))
	}
	if d.podNetns != "" && netnsExists(d.podNetns) {
		errs = append(errs, fmt.Errorf("the pod's network namespace %s left", d.podNetns))
	}
	if d.c.hostNetns != "" && netnsExists(d.c.hostNetns) {
		errs = append(errs, fmt.Errorf("network namespace %s left", d.c.hostNetns))
	}
	if d.c.hostNetns == "" {
		for _, l := range d.c.links() {
			for _, name := range l {
				if d.ip("link", "show", name) == nil {
					errs = append(errs, fmt.Errorf("link %s left", name))
				}
			}
		}
	}
	if entries, err := os.ReadDir(d.c.dir); err == nil && len(entries) > 0 {
		errs = append(errs, fmt.Errorf("%s is not empty", d.c.dir))
	}
	if pids := processesUnder(d.c.dir); len(pids) > 0 {
		errs = append(errs, fmt.Errorf("processes still running with %s in their command line: %v", d.c.dir, pids))
	}
	for name, p := range d.procs {
		if p.running() {
			errs = append(errs, fmt.Errorf("%s (pid %d) still runs", name, p.pid()))
		}
	}
	if d.world != nil && d.world.running() {
		errs = append(errs, fmt.Errorf("testworld (pid %d) still runs", d.world.pid()))
	}
	for _, p := range bpfPins() {
		if !slices.Contains(d.bpfBefore, p) {
			errs = append(errs, fmt.Errorf("%s left on the bpffs", p))
		}
	}
	return errors.Join(errs...)
}

// bpfRoots are where the provisioner pins on the host's bpffs (its
// -bpffs default).
var bpfRoots = []string{"/sys/fs/bpf/netdra", "/sys/fs/bpf/netdra-handoff"}

// bpfPins lists the paths under bpfRoots, the roots included.
func bpfPins() []string {
	var out []string
	for _, root := range bpfRoots {
		_ = filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
			if err == nil {
				out = append(out, p)
			}
			return nil
		})
	}
	return out
}

// processesUnder lists the processes whose command line names dir or a
// path under it (the children, the control plane), other than this one
// and its ancestors (a wrapper such as timeout or sudo names it too).
func processesUnder(dir string) []int {
	skip := map[int]bool{}
	for pid := os.Getpid(); pid > 1 && !skip[pid]; pid = parentOf(pid) {
		skip[pid] = true
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || skip[pid] {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == dir || strings.HasPrefix(arg, dir+"/") || strings.Contains(arg, "="+dir+"/") {
				if syscall.Kill(pid, 0) == nil {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

// parentOf returns the parent's pid from /proc/PID/stat, 0 when unknown.
func parentOf(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}
