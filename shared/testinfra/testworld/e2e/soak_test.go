package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/netdra/netdra/bench/figures"
	"github.com/netdra/netdra/shared/testinfra/nodetest"
)

// soakCIDuration is the soak's length when SOAK_DURATION is not set: the
// short form make test-world runs.
const soakCIDuration = 3 * time.Minute

// soakWarmupLifecycles is how many lifecycles the fit leaves out at least
// (SOAK_WARMUP_LIFECYCLES), or half the run's when it ran fewer than
// twice as many. The state service keeps its recent changes for its
// watchers to resume from (between one and two times changeLogSize, each
// with its own copy of the row) and a lifecycle makes several: until that
// log is full, the state's heap grows with it, a growth that stops. The
// default covers its filling with the changes a lifecycle of this test
// makes.
const soakWarmupLifecycles = 300

// soakProcs are netdra's four processes, in the order the series list
// them.
var soakProcs = []string{"state", "provisioner", "dra", "nri"}

// soakSeries are the sampled series and the growth each is held under,
// per 1,000 pod lifecycles, fitted after the warm-up.
//
// The samples are taken at rest (no lifecycle in flight), so a counted
// series stays flat unless lifecycles leave something behind. The bounds:
// a leak that costs each lifecycle something fails them, and so does one
// that costs every 50th lifecycle something. A leaked fd, goroutine, netns
// or link a lifecycle is 1,000 per 1,000; the bounds for the counted
// series are 20 (one object per 50 lifecycles). RSS: 8 MiB per 1,000
// lifecycles, 8 KiB a lifecycle, a leaked goroutine's stack and what it
// holds. The state file: 64 KiB per 1,000, under a leaked allocation row
// a lifecycle (a row is a few hundred bytes).
//
// The floors are each series' noise at rest: a growth that adds up to
// less over the fitted lifecycles is not told from it. RSS: 4 MiB, the Go
// heap's own swing between collections and its early growth in a
// small Go process; counted series: 2, a timer's or a connection's
// goroutine or fd that comes and goes; the state file: 64 KiB, one step
// of bbolt's file growth at its size. A long run's hundreds of lifecycles
// put the floors below the bounds; the CI form's few dozen (on a busy
// machine) hold only a gross leak to account.
//
// The kernel-wide netns count and the host netns' link count move with
// whatever else runs on the machine (other tests' nodes and namespaces):
// they are sampled and reported, not held to a bound; the node's own
// counts are.
func soakSeries() []figures.SoakSeries {
	var out []figures.SoakSeries
	for _, p := range soakProcs {
		out = append(out,
			figures.SoakSeries{Name: p + ".rss", Unit: "KiB", What: p + "'s VmRSS", Bound: 8192, Floor: 4096, Asserted: true},
			figures.SoakSeries{Name: p + ".fds", Unit: "fds", What: p + "'s open fds", Bound: 20, Floor: 2, Asserted: true},
			figures.SoakSeries{Name: p + ".goroutines", Unit: "goroutines", What: p + "'s go_goroutines", Bound: 20, Floor: 2, Asserted: true})
	}
	return append(out,
		figures.SoakSeries{Name: "state.db", Unit: "KiB", What: "the state file's size", Bound: 64, Floor: 64, Asserted: true},
		figures.SoakSeries{Name: "netns.node", Unit: "netns", What: "the node's netns: its pods' and the provisioner's pins", Bound: 20, Floor: 2, Asserted: true},
		figures.SoakSeries{Name: "links.node", Unit: "links", What: "links in the node's host netns (netdra's devices)", Bound: 20, Floor: 2, Asserted: true},
		figures.SoakSeries{Name: "links.bridge", Unit: "links", What: "links on the node's CNI bridge (its pods' veths)", Bound: 20, Floor: 2, Asserted: true},
		figures.SoakSeries{Name: "netns.kernel", Unit: "netns", What: "the kernel's netns (every process, fd and nsfs mount)", Bound: 20, Floor: 2},
		figures.SoakSeries{Name: "links.host", Unit: "links", What: "links in the machine's netns", Bound: 20, Floor: 2})
}

// TestE2E_Soak: pod lifecycles back to back on the real node (the chaos
// run's, chaosWorkers at once over chaosDevices host veths, with nothing
// killed) for SOAK_DURATION (default soakCIDuration; make soak runs an
// hour), sampling every SOAK_INTERVAL each netdra process's RSS (VmRSS),
// open fds and goroutines (go_goroutines of its metrics), the state
// file's size, and the netns and link counts of the node and of the
// machine. It fails on a device lost, a container that ran without its
// device, any broken invariant of the chaos run, or a series that grows,
// after the warm-up (SOAK_WARMUP, and soakWarmupLifecycles), faster than
// its bound per 1,000 lifecycles and by more than its floor over the
// fitted lifecycles (soakSeries says why each bound and floor) by a
// least-squares fit of the series against the lifecycles ended. With NETDRA_BENCH_OUT set it
// writes the samples and the fit there (figures.SoakSampleFile,
// figures.SoakRunFile) for benchreport -soak.
func TestE2E_Soak(t *testing.T) {
	d := soakDuration(t, "SOAK_DURATION", soakCIDuration)
	interval := soakDuration(t, "SOAK_INTERVAL", min(max(d/60, 5*time.Second), time.Minute))
	warmup := soakDuration(t, "SOAK_WARMUP", min(max(d/6, time.Minute), 10*time.Minute))
	if warmup >= d-10*interval {
		t.Fatalf("SOAK_WARMUP=%s leaves fewer than 10 samples of SOAK_DURATION=%s at SOAK_INTERVAL=%s", warmup, d, interval)
	}
	warmupLifecycles := int(chaosEnv(t, "SOAK_WARMUP_LIFECYCLES", soakWarmupLifecycles))
	ch := startChurnOpts(t, chaosDevices, netdraOpts{metrics: true})
	cs := &chaos{churn: ch, startEv: make(chan struct{}, 1), stopEv: make(chan struct{}, 1)}
	s := newSoaker(t, cs)
	t.Logf("soak: %s of lifecycles, %d at once over %d devices, a sample every %s, fitted after %s and %d lifecycles",
		d, chaosWorkers, chaosDevices, interval, warmup, warmupLifecycles)
	stop := make(chan struct{})
	var sampling sync.WaitGroup
	cs.churned = func() {
		close(stop)
		sampling.Wait()
	}
	s.t0 = time.Now()
	cs.until = s.t0.Add(d)
	sampling.Go(func() { s.loop(interval, stop) })
	cs.run()
	s.judge(d, interval, warmup, warmupLifecycles)
}

// soakDuration reads a duration from the environment.
func soakDuration(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration such as 3m or 1h", name, v)
	}
	return d
}

// soaker samples a chaos run's node.
type soaker struct {
	t        *testing.T
	cs       *chaos
	t0       time.Time
	http     *http.Client // the processes' metrics in this netns
	provHTTP *http.Client // the provisioner's, in the node's host netns
	samples  []figures.SoakSample
	failed   map[string]int   // samples in which each series could not be read
	firstErr map[string]error // and why, the first time
}

func newSoaker(t *testing.T, cs *chaos) *soaker {
	hostNS := cs.nn.hostNS
	dialIn := func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialInNetns(ctx, hostNS, network, addr)
	}
	return &soaker{t: t, cs: cs, failed: map[string]int{}, firstErr: map[string]error{},
		http:     &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
		provHTTP: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, DialContext: dialIn}}}
}

// dialInNetns dials addr from the named netns: the socket is made on an
// OS thread of its own moved into that netns, which is dropped afterwards
// (it never returns to the pool of threads running other goroutines).
func dialInNetns(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		h, err := netns.GetFromName(ns)
		if err != nil {
			ch <- result{err: fmt.Errorf("netns %s: %w", ns, err)}
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			ch <- result{err: fmt.Errorf("entering netns %s: %w", ns, err)}
			return
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}

// loop samples every interval until stop is closed, then once more.
// Each sample is taken at rest: the lifecycles in flight end first and no
// new one starts until it is taken, so that what a sample counts is what
// the lifecycles before it left, not the pods running at that moment.
func (s *soaker) loop(interval time.Duration, stop <-chan struct{}) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s.cs.quiesce.Lock()
		s.sample()
		s.cs.quiesce.Unlock()
		select {
		case <-stop:
			s.sample() // every lifecycle has ended
			return
		case <-tick.C:
		}
	}
}

// sample takes one sample and records it.
func (s *soaker) sample() {
	v := map[string]float64{}
	put := func(name string, x float64, err error) {
		if err != nil {
			if s.failed[name]++; s.firstErr[name] == nil {
				s.firstErr[name] = err
				s.t.Logf("soak: reading %s: %v", name, err)
			}
			return
		}
		v[name] = x
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	procs := map[string]*nodetest.Proc{"state": s.cs.nn.state, "provisioner": s.cs.nn.prov, "dra": s.cs.nn.dra, "nri": s.cs.nn.nriP}
	for _, name := range soakProcs {
		pid := procs[name].Pid()
		rss, err := vmRSS(pid)
		put(name+".rss", rss, err)
		fds, err := openFDs(pid)
		put(name+".fds", fds, err)
		g, err := s.goroutines(ctx, name)
		put(name+".goroutines", g, err)
	}
	fi, err := os.Stat(filepath.Join(s.cs.nn.dir, "state.db"))
	if err == nil {
		put("state.db", float64(fi.Size())/1024, nil)
	} else {
		put("state.db", 0, err)
	}
	n, err := s.nodeNetns()
	put("netns.node", n, err)
	n, err = kernelNetns()
	put("netns.kernel", n, err)
	links, err := netnsLinks(s.cs.nn.hostNS)
	put("links.node", float64(len(links)), err)
	bridge, all, err := hostNetnsLinks(s.cs.nn.node.Bridge())
	put("links.bridge", bridge, err)
	put("links.host", all, err)
	smp := figures.SoakSample{T: time.Since(s.t0).Seconds(), Lifecycles: int(s.cs.finished.Load()), Values: v}
	s.samples = append(s.samples, smp)
	if err := figures.Record(figures.SoakSampleFile, smp); err != nil {
		s.t.Errorf("recording a sample: %v", err)
	}
}

// vmRSS is a process's VmRSS in KiB.
func vmRSS(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) != 2 || f[1] != "kB" {
				return 0, fmt.Errorf("/proc/%d/status: VmRSS line %q", pid, line)
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no VmRSS", pid)
}

// openFDs is how many fds a process has open.
func openFDs(pid int) (float64, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return float64(len(es)), err
}

// goroutines reads go_goroutines from a process's metrics.
func (s *soaker) goroutines(ctx context.Context, name string) (float64, error) {
	c := s.http
	if name == "provisioner" {
		c = s.provHTTP
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.cs.nn.metrics[name]+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s's metrics: %s", name, resp.Status)
	}
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s's metrics have no go_goroutines", name)
}

// nodeNetns counts the node's network namespaces: those of its pods'
// sandboxes still under /var/run/netns and the provisioner's netns pins
// (nsfs mounts in its mount namespace).
func (s *soaker) nodeNetns() (float64, error) {
	s.cs.mu.Lock()
	names := make([]string, 0, len(s.cs.netns))
	for ns := range s.cs.netns {
		names = append(names, ns)
	}
	s.cs.mu.Unlock()
	n := 0
	for _, ns := range names {
		if _, err := os.Stat(filepath.Join("/var/run/netns", ns)); err == nil {
			n++
		}
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", s.cs.nn.prov.Pid()))
	if err != nil {
		return 0, err
	}
	pins := filepath.Join(s.cs.nn.dir, "pins") + "/"
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[3], "net:[") && strings.HasPrefix(f[4], pins) {
			n++
		}
	}
	return float64(n), nil
}

// kernelNetns counts the kernel's live network namespaces that something
// names: a process's own, an open fd's, an nsfs mount's (in every mount
// namespace).
func kernelNetns() (float64, error) {
	seen := map[string]bool{}
	mntSeen := map[string]bool{}
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return 0, err
	}
	for _, p := range procs {
		if l, err := os.Readlink(p + "/ns/net"); err == nil {
			seen[l] = true
		}
		fds, _ := os.ReadDir(p + "/fd")
		for _, fd := range fds {
			if l, err := os.Readlink(p + "/fd/" + fd.Name()); err == nil && strings.HasPrefix(l, "net:[") {
				seen[l] = true
			}
		}
		mnt, err := os.Readlink(p + "/ns/mnt")
		if err != nil || mntSeen[mnt] {
			continue
		}
		mntSeen[mnt] = true
		b, _ := os.ReadFile(p + "/mountinfo")
		for line := range strings.Lines(string(b)) {
			if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[3], "net:[") {
				seen[f[3]] = true
			}
		}
	}
	return float64(len(seen)), nil
}

// hostNetnsLinks counts the links of this netns, and of them those on bridge.
func hostNetnsLinks(bridge string) (onBridge, all float64, err error) {
	out, err := exec.Command("ip", "-j", "link", "show").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("ip link show: %w", err)
	}
	var links []struct {
		Master string `json:"master"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return 0, 0, fmt.Errorf("ip -j link show: %w", err)
	}
	for _, l := range links {
		if l.Master == bridge {
			onBridge++
		}
	}
	return onBridge, float64(len(links)), nil
}

// judge fits each series after the warm-up, logs the table, records the
// run and fails on a series over its bound, a device lost or a container
// that ran without its device.
func (s *soaker) judge(d, interval, warmup time.Duration, warmupLifecycles int) {
	t := s.t
	cs := s.cs
	series := soakSeries()
	run := figures.SoakRun{DurationS: d.Seconds(), Lifecycles: int(cs.finished.Load()), Workers: chaosWorkers, Devices: chaosDevices,
		WarmupS: warmup.Seconds(), IntervalS: interval.Seconds(), Samples: len(s.samples), DevicesLost: len(cs.lostNow())}
	// The fit starts after both warm-ups, the lifecycles' capped at half
	// the run's.
	run.WarmupLifecycles = min(warmupLifecycles, run.Lifecycles/2)
	for _, smp := range s.samples {
		if smp.T <= warmup.Seconds() {
			run.WarmupLifecycles = max(run.WarmupLifecycles, smp.Lifecycles)
		}
	}
	cs.mu.Lock()
	run.Violations = len(cs.violations)
	for _, v := range cs.violations {
		if strings.Contains(v, "without") || strings.Contains(v, "is running but") {
			run.WithoutDevice++
		}
	}
	cs.mu.Unlock()
	growth, err := figures.Growth(s.samples, series, warmup.Seconds(), run.WarmupLifecycles)
	if err != nil {
		t.Errorf("fitting the series: %v", err)
	}
	run.Growth = growth
	t.Logf("SOAK: %d lifecycles in %s (%d after the warm-up of %s and %d lifecycles), %d samples every %s; %d devices lost, %d containers without their device, %d violations",
		run.Lifecycles, d, run.Lifecycles-run.WarmupLifecycles, warmup, run.WarmupLifecycles, run.Samples, interval, run.DevicesLost, run.WithoutDevice, run.Violations)
	for _, g := range growth {
		verdict := "held"
		switch {
		case !g.Asserted:
			verdict = "reported"
		case !g.Held:
			verdict = "OVER"
		}
		t.Logf("SOAK: %-22s %10.1f ± %7.1f %s per 1,000 lifecycles (bound %g, floor %g over %d; %g..%g, first %g, last %g) %s",
			g.Name, g.PerThousand, g.StdErr, g.Unit, g.Bound, g.Floor, g.Span, g.Min, g.Max, g.First, g.Last, verdict)
		if g.Asserted && !g.Held {
			t.Errorf("%s grows %.1f %s per 1,000 lifecycles, over its bound of %g, and %.1f over the %d lifecycles fitted, over its floor of %g",
				g.What, g.PerThousand, g.Unit, g.Bound, g.PerThousand*float64(g.Span)/1000, g.Span, g.Floor)
		}
	}
	// A sample may miss a value (a metrics read timing out on a busy
	// machine); a series that misses one in ten is not measured.
	for name, n := range s.failed {
		if n*10 > len(s.samples) {
			t.Errorf("the series %s could not be read in %d of %d samples: %v", name, n, len(s.samples), s.firstErr[name])
		}
	}
	if run.DevicesLost > 0 {
		t.Errorf("%d devices lost: %v", run.DevicesLost, cs.lostNow())
	}
	if err := figures.Record(figures.SoakRunFile, run); err != nil {
		t.Errorf("recording the run: %v", err)
	}
}
