package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/netdra/netdra/shared/testinfra/grpcurltest"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
	"github.com/netdra/netdra/shared/testinfra/testenv"
	"github.com/netdra/netdra/shared/testinfra/testworld/controlplane"
	"github.com/netdra/netdra/shared/testinfra/testworld/worldtest"
)

// devRun is one run of `make dev`'s program (cmd/devdemo) with names of
// its own, so that it runs beside other tests: its demo links in a
// throwaway netns standing in for the host's (-host-netns), its own node
// name (the real node's bridge and pod subnet follow from it), folder, and
// no metrics ports.
type devRun struct {
	dir, hostNS, linkPrefix string
	args                    []string
	stdout                  io.Reader
	podNetns                string   // as devdemo showed it, made by containerd
	bpfBefore               []string // netdra's pins on the host's bpffs before (bpfTree)
}

var (
	devdemoOnce sync.Once
	devdemoBin  string
	devdemoErr  error
)

func newDevRun(t *testing.T, extra ...string) *devRun {
	t.Helper()
	testenv.RequireRoot(t, "creates network namespaces and moves links between them")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute) // a cold build of Kubernetes
	defer cancel()
	tw, err := controlplane.Binary(ctx, worldtest.Logger(t))
	if err != nil {
		t.Fatal(err)
	}
	bins := nodetest.Binaries(t)
	worldtest.Binaries(t) // the real node's programs: testworld finds them built
	devdemoOnce.Do(func() {
		var dir string
		if dir, devdemoErr = os.MkdirTemp("", "devdemo"); devdemoErr != nil {
			return
		}
		devdemoBin = filepath.Join(dir, "devdemo")
		out, err := exec.Command("go", "build", "-o", devdemoBin, "../cmd/devdemo").CombinedOutput()
		if err != nil {
			devdemoErr = &buildError{err, out}
		}
	})
	if devdemoErr != nil {
		t.Fatal(devdemoErr)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	s := hex.EncodeToString(b[:])
	r := &devRun{
		dir:        filepath.Join(os.TempDir(), "nddev-"+s),
		hostNS:     "nddh-" + s,
		linkPrefix: "nd" + s,
		bpfBefore:  bpfTree(),
	}
	r.args = append([]string{"-dir", r.dir, "-bin", bins, "-testworld", tw, "-grpcurl", grpcurltest.Binary(t),
		"-crds", "../../../../pods/chart/netdra/files/crds", "-host-netns", r.hostNS,
		"-link-prefix", r.linkPrefix, "-node-name", "dev-" + s, "-dra-metrics", "", "-nri-metrics", ""}, extra...)
	t.Cleanup(func() { r.forceClean() })
	return r
}

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "go build ../cmd/devdemo: " + e.err.Error() + "\n" + string(e.out)
}

func (r *devRun) command(ctx context.Context) *exec.Cmd {
	return exec.CommandContext(ctx, devdemoBin, r.args...)
}

// podNetnsRE finds the pod's network namespace in devdemo's output.
var podNetnsRE = regexp.MustCompile(`its network namespace (\S+) \(made by containerd\)`)

// checkOutput checks that devdemo showed what make dev promises: the pod's
// container's own log with net1 as the claim asks, the claim's status,
// how to look further, and the device back in the host at the end.
func (r *devRun) checkOutput(t *testing.T, out string) {
	t.Helper()
	if !r.notePodNetns(out) {
		t.Errorf("the output names no network namespace of the pod")
	}
	for _, want := range []string{
		"pod default/demo is Running",
		"== The container's own view of its network (its log " + r.dir + "/world/node/podlogs/default_demo_",
		"  testapp dump 1 netns=net:[",
		": net1: <up", "mtu 1400 hw 02:00:00:00:d0:01", "\n      inet 10.40.0.2/24\n", "\n      inet fd00:40::2/64\n",
		"\n  route 10.41.0.0/16 via 10.40.0.1 dev net1\n",
		"  testapp end 1\n",
		"== The claim's status", "interfaceName: net1", "reason: DevicePrepared",
		"export KUBECONFIG=" + r.dir + "/world/",
		"-unix " + r.dir + "/state.sock netdra.state.v1.StateService/Dump",
		"-unix -max-time 2 " + r.dir + "/provisioner.sock netdra.provisioner.v1.ProvisionerService/WatchDevices",
		"-unix " + r.dir + "/dra.sock netdra.dra.v1.DraService/Status",
		"-unix " + r.dir + "/nri.sock netdra.nri.v1.NriService/Status",
		"pod gone; " + r.linkPrefix + "0, " + r.linkPrefix + "1 back in the host netns",
		">> stopped:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q", want)
		}
	}
	if t.Failed() {
		t.Logf("devdemo output:\n%s", out)
	}
}

// notePodNetns notes the pod's network namespace that devdemo showed, for
// checkNothingLeft and forceClean; false when it showed none.
func (r *devRun) notePodNetns(out string) bool {
	m := podNetnsRE.FindStringSubmatch(out)
	if m != nil {
		r.podNetns = m[1]
	}
	return m != nil
}

// checkNothingLeft checks, independently of devdemo, that it left nothing:
// no netns of its (the host stand-in, the pod's), no demo link in the host
// netns, no folder, no mount under it, no process (the real node's
// kubelet, containerd and shims name the folder), nothing new of netdra's
// on the host's bpffs (the provisioner's folders included).
func (r *devRun) checkNothingLeft(t *testing.T) {
	t.Helper()
	for _, p := range bpfTree() {
		if !slices.Contains(r.bpfBefore, p) {
			t.Errorf("left on the host's bpffs: %s", p)
		}
	}
	for _, ns := range []string{r.hostNS, r.podNetns} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); ns != "" && err == nil {
			t.Errorf("network namespace %s left", ns)
		}
	}
	for _, l := range []string{r.linkPrefix + "0", r.linkPrefix + "0p", r.linkPrefix + "1", r.linkPrefix + "1p"} {
		if exec.Command("ip", "link", "show", l).Run() == nil {
			t.Errorf("link %s in the host netns", l)
		}
	}
	if _, err := os.Stat(r.dir); !os.IsNotExist(err) {
		t.Errorf("%s left: %v", r.dir, err)
	}
	if pids := processesNaming(r.dir); len(pids) > 0 {
		t.Errorf("processes naming %s still run: %v", r.dir, pids)
	}
	if m := mountsUnder(r.dir); len(m) > 0 {
		t.Errorf("mounts under %s left: %v", r.dir, m)
	}
}

// forceClean removes what a failed run may have left, so that a failure
// does not leak into the machine. It first gives a testworld that is still
// stopping (devdemo killed: the kernel sent it SIGTERM) the time to remove
// its real node itself, which puts the host back as it was.
func (r *devRun) forceClean() {
	deadline := time.Now().Add(3 * time.Minute)
	for len(processesNaming(r.dir)) > 0 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	for _, pid := range processesNaming(r.dir) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	for _, m := range mountsUnder(r.dir) {
		_ = syscall.Unmount(m, syscall.MNT_DETACH)
	}
	for _, ns := range []string{r.hostNS, r.podNetns} {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); ns != "" && err == nil {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	}
	os.RemoveAll(r.dir)
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// processesNaming lists the processes with dir or a path under it in their
// command line (also as a flag's value: the kubelet's --config=...).
func processesNaming(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(b), "\x00") {
			if arg == dir || strings.HasPrefix(arg, dir+"/") || strings.Contains(arg, "="+dir+"/") {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// TestE2E_DevOneshot is `make dev DEV_ONESHOT=1`: the whole scenario —
// test world, the four node processes, a pod whose claim puts net1 with a
// MAC, an MTU, two addresses and a route in its netns — shown, checked by
// devdemo itself, cleaned up, and nothing left.
func TestE2E_DevOneshot(t *testing.T) {
	// With dra's metrics on a free port: the device's eBPF counters show.
	r := newDevRun(t, "-oneshot", "-dra-metrics", testenv.FreeAddr(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	out, err := r.command(ctx).CombinedOutput()
	if err != nil {
		t.Fatalf("devdemo -oneshot: %v\n%s", err, out)
	}
	r.checkOutput(t, string(out))
	if !strings.Contains(string(out), ">> checked: the container sees net1 up with MAC 02:00:00:00:d0:01, MTU 1400") {
		t.Errorf("the oneshot run did not say it checked the container's view")
	}
	if !strings.Contains(string(out), "== The device's counters") || !strings.Contains(string(out), `netdra_device_packets_total{`) {
		t.Errorf("the output shows no device counters:\n%s", out)
	}
	r.checkNothingLeft(t)
}

// TestE2E_DevCtrlC is `make dev` and a Ctrl-C: it runs until SIGINT, then
// removes everything it made and exits 0.
func TestE2E_DevCtrlC(t *testing.T) {
	r := newDevRun(t)
	cmd, out, stderr := r.startUntilRunning(t)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := r.wait(cmd, out); err != nil {
		t.Fatalf("devdemo after Ctrl-C: %v\n%s\nstderr:\n%s", err, out.String(), stderr.String())
	}
	if !strings.Contains(out.String(), ">> Ctrl-C: cleaning up") {
		t.Errorf("no word of the Ctrl-C")
	}
	r.checkOutput(t, out.String())
	r.checkNothingLeft(t)
}

// TestE2E_DevNodeProcessDies: dra killed (-9) while make dev runs: it says
// so, removes everything it made anyway and exits with a failure.
func TestE2E_DevNodeProcessDies(t *testing.T) {
	r := newDevRun(t)
	cmd, out, stderr := r.startUntilRunning(t)
	m := regexp.MustCompile(`>> dra +pid (\d+) `).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no dra pid in the output:\n%s", out.String())
	}
	pid, _ := strconv.Atoi(m[1])
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := r.wait(cmd, out)
	if err == nil || !strings.Contains(stderr.String(), "dra exited while running") {
		t.Errorf("devdemo with dra killed: %v, want a failure naming dra; stderr:\n%s", err, stderr.String())
	}
	r.checkNothingLeft(t)
}

// startUntilRunning starts devdemo and reads its output until it runs.
func (r *devRun) startUntilRunning(t *testing.T) (*exec.Cmd, *strings.Builder, *bytes.Buffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	cmd := r.command(ctx)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.stdout = stdout
	out := &strings.Builder{}
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
		if sc.Text() == "Running until Ctrl-C." {
			r.notePodNetns(out.String())
			return cmd, out, stderr
		}
	}
	_ = cmd.Wait()
	t.Fatalf("devdemo did not come up:\n%s\nstderr:\n%s", out.String(), stderr.String())
	return nil, nil, nil
}

// wait reads the rest of the output and waits for devdemo to exit.
func (r *devRun) wait(cmd *exec.Cmd, out *strings.Builder) error {
	rest, _ := io.ReadAll(r.stdout)
	out.Write(rest)
	return cmd.Wait()
}

// TestE2E_DevRefusesLeftovers: a non-empty folder (a make dev that was
// killed) is refused with a clear error before anything is made.
func TestE2E_DevRefusesLeftovers(t *testing.T) {
	r := newDevRun(t, "-oneshot")
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.dir, "state.db"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := r.command(context.Background()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), r.dir+" is not empty") {
		t.Fatalf("devdemo on a non-empty folder: %v, want a refusal naming it:\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(r.dir, "state.db")); err != nil || string(b) != "stale" {
		t.Errorf("the existing file was touched: %v %q", err, b)
	}
	if exec.Command("ip", "netns", "pids", r.hostNS).Run() == nil {
		t.Errorf("netns %s made despite the refusal", r.hostNS)
	}
	os.RemoveAll(r.dir)
	r.checkNothingLeft(t)
}
