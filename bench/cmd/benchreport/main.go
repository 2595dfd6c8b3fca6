// Command benchreport turns the figures netdra's benchmarks wrote (see
// bench/figures) into bench/RESULTS.md and a PNG plot of the attach latency
// distributions, pipeline against baseline. `make bench` runs it after the
// benchmarks; it measures nothing itself and asserts nothing.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/netdra/netdra/bench/figures"
)

func main() {
	in := flag.String("in", "", "folder holding the benchmarks' records ($NETDRA_BENCH_OUT)")
	out := flag.String("out", "bench/RESULTS.md", "the report to write")
	png := flag.String("png", "bench/latency.png", "the plot to write (linked from the report by its base name)")
	elapsed := flag.Duration("elapsed", 0, "how long the benchmark run took, for the report")
	scale := flag.Bool("scale", false, "rewrite only the report's scale section, and the scale plot -scale-png, from -in's scale records (make bench-scale)")
	scalePNG := flag.String("scale-png", "bench/scale.png", "the scale plot to write with -scale")
	targetsFile := flag.String("targets", "", "the targets file to set the figures beside, with -scale too (default: targets.yaml beside -out)")
	soak := flag.Bool("soak", false, "rewrite only the report's soak section, and the soak plot -soak-png, from -in's soak records (make soak)")
	soakPNG := flag.String("soak-png", "bench/soak.png", "the soak plot to write with -soak")
	coldci := flag.String("coldci", "", "rewrite only the report's cold CI section from this log of a cold .ci/run (make ci-cold)")
	coldAbout := flag.String("coldci-about", "", "what the cold run was (commit, machine), for its section")
	coldRC := flag.Int("coldci-rc", 0, "the cold run's exit status")
	flag.Parse()
	t := *targetsFile
	if t == "" {
		t = filepath.Join(filepath.Dir(*out), "targets.yaml")
	}
	var err error
	if *coldci != "" {
		err = runColdCI(*coldci, *out, t, *coldAbout, *coldRC)
	} else if *soak {
		err = runSoak(*in, *out, *soakPNG, *elapsed)
	} else if *scale {
		err = runScale(*in, *out, *scalePNG, t, *elapsed)
	} else {
		err = run(*in, *out, *png, t, *elapsed)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

type data struct {
	attach    []figures.Attach
	rss       []figures.RSS
	prepare   []figures.Prepare
	inventory []figures.Inventory
	discover  []figures.Summary
	subif     []figures.Subif
	settings  []figures.Settings
	podstart  []figures.PodStart
	restart   []figures.KubeletRestart
	beside    []figures.Beside
	raw       []string
}

func run(in, out, png, targetsFile string, elapsed time.Duration) error {
	if in == "" {
		return fmt.Errorf("-in is required")
	}
	ts, err := readTargets(targetsFile)
	if err != nil {
		return err
	}
	var d data
	if d.attach, err = figures.Read[figures.Attach](in, figures.AttachFile); err != nil {
		return err
	}
	if d.rss, err = figures.Read[figures.RSS](in, figures.RSSFile); err != nil {
		return err
	}
	if d.prepare, err = figures.Read[figures.Prepare](in, figures.PrepareFile); err != nil {
		return err
	}
	if d.inventory, err = figures.Read[figures.Inventory](in, figures.InventoryFile); err != nil {
		return err
	}
	if d.discover, err = figures.Read[figures.Summary](in, figures.DiscoverFile); err != nil {
		return err
	}
	if d.subif, err = figures.Read[figures.Subif](in, figures.SubifFile); err != nil {
		return err
	}
	if d.settings, err = figures.Read[figures.Settings](in, figures.SettingsFile); err != nil {
		return err
	}
	if d.podstart, err = figures.Read[figures.PodStart](in, figures.PodStartFile); err != nil {
		return err
	}
	if d.restart, err = figures.Read[figures.KubeletRestart](in, figures.RestartFile); err != nil {
		return err
	}
	if d.beside, err = figures.Read[figures.Beside](in, figures.BesideFile); err != nil {
		return err
	}
	d.raw = benchLines(filepath.Join(in, "bench.txt"))
	if err := writePlot(png, d.attach, d.podstart); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	var b strings.Builder
	if err := writeReport(&b, d, ts, filepath.Base(png), elapsed); err != nil {
		return err
	}
	return os.WriteFile(out, []byte(carryMarked(string(old), b.String())), 0o644)
}

// markerBegin finds a marked section's first line: make bench-scale's,
// make soak's, make ci-cold's and those written by hand, each
// `<!-- NAME:begin (who writes it) -->` up to `<!-- NAME:end -->`.
var markerBegin = regexp.MustCompile(`(?m)^<!-- ([a-z0-9-]+):begin\b.*-->$`)

// carryMarked returns report with every marked section of old carried
// over as it is: in place of the report's own, or at its end in old's
// order. make bench measures none of them.
func carryMarked(old, report string) string {
	for _, m := range markerBegin.FindAllStringSubmatch(old, -1) {
		begin, end := m[0], "<!-- "+m[1]+":end -->"
		if s := markedSection(old, begin, end); s != "" {
			report = spliceMarked(report, s, begin, end)
		}
	}
	return report
}

func writeReport(w io.Writer, d data, ts targets, png string, elapsed time.Duration) error {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("# netdra benchmark results")
	p("")
	p("Generated by `make bench` on %s (the run took %s). Regenerate with `make bench` (as root);", time.Now().UTC().Format("2006-01-02 15:04 UTC"), elapsed.Round(time.Second))
	p("the figures below are this run's, on this machine, which other work shares: read them as one sample.")
	p("Nothing in the benchmarks asserts a figure; the targets of bench/targets.yaml are set beside them.")
	p("")
	writeMachine(p)
	p("")
	p("## Commands")
	p("")
	p("`make bench` runs, with `NETDRA_BENCH_OUT` set to a fresh folder:")
	p("")
	p("```sh")
	p("go test -run '^$' -bench 'State|Sriov' -benchtime 2s -count 1 ./bench/         # sr-iov discovery alone, the state service")
	p("go test -run '^$' -bench Attach -benchtime 1x -count 1 -timeout 30m ./bench/    # attach latency, moves, the host's hooks, memory")
	p("go test -run '^$' -bench Hook -benchtime 300x -count 1 ./bench/               # the container's OCI hook, exec to exit")
	p("go test -run '^$' -bench BenchmarkAttach_SubifVsMove -benchtime 200x -count 1 ./services/provisioner/link/   # the sub-interface's attach against a move")
	p("go test -run '^$' -bench BenchmarkAttach_Settings -benchtime 200x -count 1 ./services/provisioner/link/   # the pod network settings, each")
	p("cd shared/testinfra/testworld && go test -p 1 -run '^$' -bench . -benchtime 1x -count 1 -timeout 60m ./benchworld/   # publication, dra's memory; the real node's hooks and pod startup")
	p("go run ./bench/cmd/benchreport -in $NETDRA_BENCH_OUT -out bench/RESULTS.md -png bench/latency.png")
	p("```")
	p("")
	p("`NETDRA_BENCH_LOGS=1` makes the benchworld processes log at debug level and prints their logs (`go test -v`), to")
	p("see where a figure's time goes.")
	p("")
	if err := writeTargets(p, d, ts); err != nil {
		return err
	}
	writeAttach(p, d.attach, png)
	writePodStart(p, d.podstart, d.restart)
	writeHook(p, d.raw)
	writeBeside(p, d.beside)
	writePrepare(p, d.prepare)
	writeMoves(p, d.attach)
	writeSubif(p, d.subif)
	writeSettings(p, d.settings)
	writeInventory(p, d.inventory, d.discover)
	writeRSS(p, d.rss)
	writeCauses(p, ts.Causes)
	writeRaw(p, d.raw)
	return nil
}

// writeCauses is the section of what the code says about the gaps to the
// targets (the targets file's causes), when there is one.
func writeCauses(p func(string, ...any), causes string) {
	if causes == "" {
		return
	}
	p("## Where the time goes (from the code, with the figure that shows it)")
	p("")
	p("%s", strings.TrimRight(causes, "\n"))
	p("")
}

// writeHook is the hook section: BenchmarkHook_ExecToExit's lines.
func writeHook(p func(string, ...any), raw []string) {
	var lines []string
	for _, l := range raw {
		if strings.HasPrefix(l, "BenchmarkHook") {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return
	}
	p("## The container's OCI hook: exec to exit")
	p("")
	p("BenchmarkHook_ExecToExit: a container of a claim runs one netdra hook, `netdra-hook check-netns -socket <gate>`")
	p("(the gate's wait and the netns check in one process), exec'd with the OCI state on its stdin as runc runs it and")
	p("timed from its exec to its exit, against an empty Go program built the same way (static, stripped) and exec'd the")
	p("same way in the same turns. The gate answers at once: this is the process's own cost, not the attach's. P50s in ms,")
	p("and the hook's over the empty program's:")
	p("")
	p("```")
	for _, l := range lines {
		p("%s", l)
	}
	p("```")
	p("")
}

func writeRaw(p func(string, ...any), raw []string) {
	if len(raw) == 0 {
		return
	}
	p("## The benchmark lines of this run")
	p("")
	p("As `go test -bench` printed them (BenchmarkState_Prepare_SocketVsDirect: a claim's prepare bookkeeping through")
	p("the state socket against the store in process; BenchmarkState_ConcurrentWrites: the store's fsynced writes per")
	p("second from 8 and 64 writers at once over one writer's, which its group commit raises above 1).")
	p("")
	p("```")
	for _, l := range raw {
		p("%s", l)
	}
	p("```")
}

// benchLines returns the result lines of `go test -bench` in file.
func benchLines(path string) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "Benchmark") && strings.Contains(l, "ns/op") || strings.HasPrefix(l, "ok ") || strings.HasPrefix(l, "FAIL") {
			out = append(out, l)
		}
	}
	return out
}

func writeMachine(p func(string, ...any)) {
	p("## Machine")
	p("")
	p("| | |")
	p("|---|---|")
	p("| CPU | %s, %d cores (nproc) |", cpuModel(), runtime.NumCPU())
	p("| memory | %s |", memTotal())
	p("| kernel | %s |", readTrim("/proc/sys/kernel/osrelease"))
	p("| Go | %s %s/%s |", runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			var kib float64
			fmt.Sscan(f[1], &kib)
			return fmt.Sprintf("%.1f GiB", kib/(1<<20))
		}
	}
	return "unknown"
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// find returns the record of mode, devices and concurrency.
func find(as []figures.Attach, mode string, devices, pods int) (figures.Attach, bool) {
	for _, a := range as {
		if a.Mode == mode && a.Devices == devices && a.Concurrency == pods {
			return a, true
		}
	}
	return figures.Attach{}, false
}

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func mib(kib int) float64 { return float64(kib) / 1024 }

// configs lists (devices, pods) in the order measured.
func configs(as []figures.Attach) [][2]int {
	var out [][2]int
	seen := map[[2]int]bool{}
	for _, a := range as {
		k := [2]int{a.Devices, a.Concurrency}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

func writeAttach(p func(string, ...any), as []figures.Attach, png string) {
	p("## 1. Attach and detach: the pipeline against the kernel's own cost")
	p("")
	p("Per pod: each device set down, given a MAC and an MTU, renamed, moved into the pod's netns (one move), given an")
	p("IPv4 and an IPv6 address, set up, given a route; and back (down, MAC, MTU, name, one move). **baseline**: those")
	p("netlink calls from one process (vishvananda/netlink) on veths in a throwaway host netns. **pipeline**: the real")
	p("NRI runtime side (containerd's `pkg/adaptation`) sends RunPodSandbox and CreateContainer, and the container's")
	p("createRuntime hook (nri's gate, netdra-hook) is exec'd as runc would: attach is timed until the hook lets the")
	p("container be created, the devices configured in the pod. StopPodSandbox and RemovePodSandbox follow, detach timed")
	p("until the devices are back in the host netns. `nri` calls the real `state` and `provisioner` processes (the")
	p("provisioner in its own throwaway host netns, its host manager offering 512 veths), with the allocations recorded")
	p("beforehand as dra does at prepare. **provisioner** (1 pod only): the provisioner's Attach and Detach RPCs called")
	p("directly, one device after the other, to split the pipeline's cost. **no-hook-exec** (1 pod only): the pipeline")
	p("with the gate's wait called from the benchmark's process (WaitAttached on the gate socket, as netdra-hook calls")
	p("it) instead of exec'ing netdra-hook: the pipeline minus it is the share of the hook's process.")
	p("Closed loop: each of the concurrent pods attaches, detaches and starts over; moves/s is all moves over the wall time.")
	p("A pipeline pod starts over once nri recorded its detach (MarkDetached, after the devices were back: untimed): the")
	p("workers attach the same pods again, which on a node are new pods, whose attach waits for no earlier detach.")
	p("The modes run in turns (2 or 3 of each, alternating: baseline, pipeline, and for 1 pod provisioner and no-hook-exec),")
	p("their samples pooled, so that what else the machine did in the run falls on all of them. The hook times of 1-pod")
	p("configurations include the no-hook-exec runs' (nri's hooks are the same; only who waits on the gate differs).")
	p("p99 is the nearest rank: with fewer than 100 lifecycles it is the slowest one. A failed attach or detach is counted")
	p("under failures and left out of the latencies (the pod's next lifecycle starts over).")
	p("")
	p("| devices | pods | mode | lifecycles | attach p50 ms | attach p99 ms | detach p50 ms | detach p99 ms | moves/s | failures |")
	p("|---|---|---|---|---|---|---|---|---|---|")
	for _, c := range configs(as) {
		for _, mode := range []string{"baseline", "provisioner", "no-hook-exec", "pipeline"} {
			a, ok := find(as, mode, c[0], c[1])
			if !ok {
				continue
			}
			p("| %d | %d | %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %d |", a.Devices, a.Concurrency, a.Mode, a.Pods,
				a.Attach.P50, a.Attach.P99, a.Detach.P50, a.Detach.P99, a.MovesPerSec, a.Failures)
		}
	}
	p("")
	p("Ratios pipeline/baseline:")
	p("")
	p("| devices | pods | attach p50 | attach p99 | detach p50 | detach p99 | moves/s |")
	p("|---|---|---|---|---|---|---|")
	for _, c := range configs(as) {
		bl, ok1 := find(as, "baseline", c[0], c[1])
		pl, ok2 := find(as, "pipeline", c[0], c[1])
		if !ok1 || !ok2 {
			continue
		}
		p("| %d | %d | %s | %s | %s | %s | %s |", c[0], c[1], ratio(pl.Attach.P50, bl.Attach.P50), ratio(pl.Attach.P99, bl.Attach.P99),
			ratio(pl.Detach.P50, bl.Detach.P50), ratio(pl.Detach.P99, bl.Detach.P99), ratio(pl.MovesPerSec, bl.MovesPerSec))
	}
	for _, a := range as {
		if a.FirstError != "" {
			p("")
			p("First failure of %s, %d device(s), %d pod(s): `%s`", a.Mode, a.Devices, a.Concurrency, a.FirstError)
		}
	}
	p("")
	p("![attach latency CDFs, pipeline against baseline](%s)", png)
	p("")
	p("The plot: one panel per configuration (rows: 1 and 8 devices a pod; columns: 1, 16 and 64 concurrent pods), the")
	p("cumulative distribution of the attach latency on a log scale from 1 ms to 100 s: baseline blue, pipeline red,")
	p("provisioner alone green; the dashed lines are p50 and p99.")
	p("")
}

func writeMoves(p func(string, ...any), as []figures.Attach) {
	p("## 3. Namespace moves per pod lifecycle")
	p("")
	p("| manager | moves in | moves out | how counted |")
	p("|---|---|---|---|")
	measured := false
	for _, a := range as {
		if a.Mode == "pipeline" && a.Devices == 1 && a.Concurrency == 1 && a.Pods > 0 && a.MovesCounted > 0 {
			per := float64(a.MovesCounted) / float64(a.Pods)
			p("| host | %.1f | (in+out together: %.2f a lifecycle) | measured: %d moves seen in the provisioner's host netns (link events) over %d pipeline lifecycles of 1 device |",
				per/2, per, a.MovesCounted, a.Pods)
			measured = true
		}
	}
	if !measured {
		p("| host | 1 | 1 | read from the code (not measured in this run) |")
	}
	p("| sr-iov (VF with a netdev) | 1 | 1 | read from the code: `server.Attach`/`Detach` call `link.Mover` (one `LinkSetNsFd` each way) for every device with a kernel name |")
	p("| sr-iov (VF bound to vfio-pci) | 0 | 0 | read from the code: no kernel name, `Attach` only validates |")
	p("| dummy | 0 | 0 | the link is created inside the pod netns at Attach and deleted there at Detach; asserted by `services/provisioner/server/moves_netns_test.go` (kernel notifications, `link/linktest`), which also asserts 1 + 1 for host |")
	p("| subif (macvlan, ipvlan, VLAN) | 0 | 0 | the link is created inside the pod netns at Attach by one RTM_NEWLINK naming the pod netns and the parent, deleted there at Detach; asserted by `services/provisioner/server/subif_netns_test.go` (macvlan, host kernel) and `subif_kernel_test.go` (ipvlan, VLAN, kernel rig), kernel notifications, `link/linktest` |")
	p("")
	p("Every manager is at the minimum: one move in and one out for a VF or a host interface, none for a")
	p("dummy. Before this change a dummy cost 1 + 1: it was created in the host at Setup and moved in and out.")
	p("")
}

// writeSubif sets a sub-interface's attach and detach (created in the pod,
// deleted there) beside the kernel's baseline (a veth moved in and back),
// both measured in this run, with their ratio.
func writeSubif(p func(string, ...any), ss []figures.Subif) {
	if !section(p, "### A sub-interface's attach against the kernel's baseline", len(ss) > 0) {
		return
	}
	way := func(name string) (figures.Subif, bool) {
		for _, s := range ss {
			if s.Way == name {
				return s, true
			}
		}
		return figures.Subif{}, false
	}
	base, okb := way("move-veth")
	sub, oks := way("create-macvlan")
	p("One device at a time, link level (`link.Mover`, no RPC), the same full config both ways (name, MAC, MTU 1400, an")
	p("IPv4 and an IPv6 address, a route); means of n attaches and detaches, both measured in this run.")
	p("")
	p("| one device, link level | n | attach ms | detach ms |")
	p("|---|---|---|---|")
	for _, s := range ss {
		what := map[string]string{"move-veth": "veth moved in / out (the kernel's baseline: one move each way)",
			"create-macvlan": "macvlan created in the pod / deleted there (0 moves)"}[s.Way]
		p("| %s | %d | %.1f | %.1f |", cmp.Or(what, s.Way), s.N, s.AttachMs, s.DetachMs)
	}
	if okb && oks {
		p("")
		p("Ratio sub-interface/baseline: attach %s, detach %s.", ratio(sub.AttachMs, base.AttachMs), ratio(sub.DetachMs, base.DetachMs))
		if sub.DetachMs/base.DetachMs > sub.AttachMs/base.AttachMs {
			p("The detach gains less than the attach: deleting a link waits for the kernel's RCU grace periods")
			p("(`unregister_netdevice`), as a move does.")
		}
	}
	p("")
}

// section writes a section's heading and, when nothing of it was measured
// in this run, says so; it reports whether there is more to write.
func section(p func(string, ...any), heading string, measured bool) bool {
	p(heading)
	p("")
	if !measured {
		p("Not measured in this run.")
		p("")
	}
	return measured
}

func writePrepare(p func(string, ...any), ps []figures.Prepare) {
	if !section(p, "## 2. Prepare through the kubelet protocol to the claim status in the apiserver", len(ps) > 0) {
		return
	}
	p("NodePrepareResources (DRA v1, on dra's plugin socket, one claim a call) until it returns: the kubelet plugin helper")
	p("GETs the claim from the test world's real kube-apiserver, dra GETs its pod, BeginPrepare in state, Setup in the")
	p("provisioner (host veths), the CDI spec, CommitPrepare, then the helper's device metadata files (not fsynced); the")
	p("claim status is written after the answer. Then NodeUnprepareResources. One request a device.")
	p("")
	p("Back to back: one claim after the other, as a kubelet starting pods would. Paced: 2.5 s between claims, so that")
	p("dra's client-side rate limiter (50 requests a second in bursts of 100, dra's defaults) is full before each: the")
	p("difference is what the limiter costs.")
	p("")
	p("| devices a claim | claims | spacing | prepare p50 ms | prepare p99 ms | unprepare p50 ms | unprepare p99 ms |")
	p("|---|---|---|---|---|---|---|")
	for _, x := range ps {
		spacing := "back to back"
		if x.Paced {
			spacing = "paced 2.5 s"
		}
		p("| %d | %d | %s | %.1f | %.1f | %.1f | %.1f |", x.Devices, x.Prepare.N, spacing, x.Prepare.P50, x.Prepare.P99, x.Unprepare.P50, x.Unprepare.P99)
	}
	p("")
}

func writeInventory(p func(string, ...any), is []figures.Inventory, ds []figures.Summary) {
	if !section(p, "## 4. Inventory at scale", len(is) > 0) {
		return
	}
	p("From the NodeConfig update that enables the sr-iov manager (dra already registered, its pool published empty) to")
	p("every device in the node's ResourceSlices, as a watch on them sees it; in rounds (the manager disabled, every device")
	p("unpublished, and enabled again), the median round the figure. Bytes (the first round): the apiserver's own")
	p("`apiserver_request_body_size_bytes` histogram for `resourceslices` (sum over verbs, read from its /metrics before")
	p("and 1 s after), and the size of the published slices as JSON.")
	p("")
	p("| devices | seconds (median) | each round, s | slices | write requests | request body bytes | slices as JSON, bytes | setup |")
	p("|---|---|---|---|---|---|---|---|")
	for _, x := range is {
		p("| %d | %.2f | %s | %d | %.0f | %.0f | %d | %s |", x.Devices, x.Seconds, seconds(x.RoundsMs), x.Slices, x.Requests, x.BodyBytes, x.ObjectsBytes, x.How)
	}
	p("")
	for _, d := range ds {
		p("The provisioner's share: one sr-iov discovery of the same tree (`sriov.Discover`, in process,")
		p("BenchmarkSriov_Discover_1024VFs) takes p50 %.0f ms, p99 %.0f ms over %d runs; the sr-iov manager runs it at start", d.P50, d.P99, d.N)
		p("and again on every link event and resync.")
		p("")
	}
}

func writeRSS(p func(string, ...any), rs []figures.RSS) {
	p("## 5. Memory")
	p("")
	p("VmRSS (under churn: the peak of samples every 50 ms) and VmHWM from /proc/PID/status, and where read, of the")
	p("memory at the phase's end, RssAnon (the heap's and the stacks' pages) and RssFile (the pages of the mapped binary:")
	p("clean, shared with the page cache, taken back by the kernel under memory pressure without a write).")
	p("")
	p("| process | phase | VmRSS MiB | VmHWM MiB | RssAnon MiB | RssFile MiB | when |")
	p("|---|---|---|---|---|---|---|")
	for _, r := range rs {
		anon, file := "-", "-"
		if r.AnonKiB+r.FileKiB > 0 {
			anon, file = fmt.Sprintf("%.1f", mib(r.AnonKiB)), fmt.Sprintf("%.1f", mib(r.FileKiB))
		}
		p("| %s | %s | %.1f | %.1f | %s | %s | %s |", r.Process, r.Phase, mib(r.RSSKiB), mib(r.HWMKiB), anon, file, r.Context)
	}
	p("")
}

// writeSettings is the cost of each group of pod network settings at the
// link level, against the baseline measured in the same run.
func writeSettings(p func(string, ...any), ss []figures.Settings) {
	if !section(p, "### What each pod network setting adds to an attach", len(ss) > 0) {
		return
	}
	var base figures.Settings
	for _, s := range ss {
		if s.Setting == "baseline" {
			base = s
		}
	}
	p("One veth at a time, link level (`link.Mover`, no RPC): the baseline config (the interface's name and two")
	p("addresses), then the baseline with one group of settings (the claim parameters of the same names; the VRF is")
	p("not measured: the host kernel has no vrf module), then all of them; means of n attaches and detaches, all")
	p("measured in this run. The settings are applied after the move, in the attach nri runs once RunPodSandbox has")
	p("returned: they add to the pod's attach, not to a hook's time.")
	p("")
	p("| settings | n | attach ms | detach ms | attach / baseline | detach / baseline |")
	p("|---|---|---|---|---|---|")
	for _, s := range ss {
		p("| %s | %d | %.1f | %.1f | %s | %s |", s.Setting, s.N, s.AttachMs, s.DetachMs, ratio(s.AttachMs, base.AttachMs), ratio(s.DetachMs, base.DetachMs))
	}
	p("")
}
