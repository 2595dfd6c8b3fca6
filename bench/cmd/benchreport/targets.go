package main

import (
	"cmp"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/bench/figures"
)

// targets is the targets file (bench/targets.yaml): which measured figure
// is wanted where. The report sets each beside this run's figure.
type targets struct {
	Targets []target `json:"targets"`
	// GroupNotes are printed once, after the causes, when a target of
	// their group is not met.
	GroupNotes map[string]string `json:"groupNotes,omitempty"`
}

// target is one line of the targets table.
type target struct {
	Group   string  `json:"group"`
	Name    string  `json:"name"`
	Figure  string  `json:"figure"`
	Compare string  `json:"compare"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	// Why is the cause, from the code or an earlier investigation, that
	// keeps the target out of reach; printed when it is not met.
	Why string `json:"why,omitempty"`
}

// figurePatterns are the names of the figures figuresOf can measure; a
// target naming another is refused.
var figurePatterns = []*regexp.Regexp{
	regexp.MustCompile(`^(attach|detach)\.(p50|p99)\.ratio\.[0-9]+dev$`),
	regexp.MustCompile(`^moves\.ratio\.64pods\.[0-9]+dev$`),
	regexp.MustCompile(`^nri\.(RunPodSandbox|StopPodSandbox)\.mean$`),
	regexp.MustCompile(`^beside\.(kubelet\.delay|hooks\.mean)$`),
	regexp.MustCompile(`^podstart\.(serial\.claim\.delta|burst\.p50\.ratio|burst\.p99\.ratio)$`),
	regexp.MustCompile(`^kubelet\.restart$`),
	regexp.MustCompile(`^rss\.[a-z]+\.[a-z0-9-]+$`),
	regexp.MustCompile(`^inventory\.[0-9]+dev\.seconds$`),
}

var units = []string{"x", "ms", "s", "MiB"}

// readTargets reads and checks the targets file at path; a bad target is
// an error naming its field (targets[N].compare).
func readTargets(path string) (targets, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return targets{}, err
	}
	var ts targets
	if err := yaml.UnmarshalStrict(b, &ts); err != nil {
		return targets{}, fmt.Errorf("%s: %w", path, err)
	}
	for i, t := range ts.Targets {
		field := func(f string) string { return fmt.Sprintf("%s: targets[%d].%s", path, i, f) }
		switch {
		case t.Group == "":
			return targets{}, fmt.Errorf("%s: required", field("group"))
		case t.Name == "":
			return targets{}, fmt.Errorf("%s: required", field("name"))
		case !slices.ContainsFunc(figurePatterns, func(re *regexp.Regexp) bool { return re.MatchString(t.Figure) }):
			return targets{}, fmt.Errorf("%s: %q is no figure benchreport measures", field("figure"), t.Figure)
		case compare(t.Compare, 0, 0) == nil:
			return targets{}, fmt.Errorf("%s: %q, want one of <=, <, >=, >", field("compare"), t.Compare)
		case !slices.Contains(units, t.Unit):
			return targets{}, fmt.Errorf("%s: %q, want one of %s", field("unit"), t.Unit, strings.Join(units, ", "))
		}
	}
	return ts, nil
}

// compare is whether got compares to want as op says; nil for an op that
// is none.
func compare(op string, got, want float64) *bool {
	var ok bool
	switch op {
	case "<=":
		ok = got <= want
	case "<":
		ok = got < want
	case ">=":
		ok = got >= want
	case ">":
		ok = got > want
	default:
		return nil
	}
	return &ok
}

// wanted is t's wanted column: "<= 1.05x", "< 30 MiB".
func (t target) wanted() string {
	if t.Unit == "x" {
		return fmt.Sprintf("%s %.2fx", t.Compare, t.Value)
	}
	return fmt.Sprintf("%s %g %s", t.Compare, t.Value, t.Unit)
}

// figure is one measured figure of this run: its value in its target's
// unit, how the report shows it, whether the run it comes from failed
// (then no target on it is met), and, computed from this run, the cause
// of a gap to a target.
type figure struct {
	value  float64
	shown  string
	failed bool
	detail string
}

// row is one line of the targets table: a target, what this run measured
// and whether that meets it; a target of which nothing was measured says
// so and is not met.
type row struct {
	target
	measured string
	met      bool
	// why is, for a target not met, its cause: this run's, then the
	// target's own.
	why string
}

// evaluate sets each target beside its figure of figs.
func evaluate(ts []target, figs map[string]figure) []row {
	var out []row
	for _, t := range ts {
		f, ok := figs[t.Figure]
		if !ok {
			out = append(out, row{target: t, measured: "not measured in this run"})
			continue
		}
		r := row{target: t, measured: f.shown, met: *compare(t.Compare, f.value, t.Value) && !f.failed}
		r.why = strings.Join(slices.DeleteFunc([]string{f.detail, t.Why}, func(s string) bool { return s == "" }), "; ")
		out = append(out, r)
	}
	return out
}

func writeTargets(p func(string, ...any), d data, ts targets) {
	p("## Targets, side by side")
	p("")
	p("Each target of bench/targets.yaml with this run's figure; a target this run did not measure says so (and is not met).")
	p("")
	p("| group | target | wanted | measured | |")
	p("|---|---|---|---|---|")
	rows := evaluate(ts.Targets, figuresOf(d))
	for _, r := range rows {
		v := verdict(r.met)
		if strings.HasPrefix(r.measured, "not measured") {
			v = "not measured"
		}
		p("| %s | %s | %s | %s | %s |", r.Group, r.Name, r.wanted(), r.measured, v)
	}
	p("")
	writeWhy(p, rows, ts.GroupNotes)
}

// writeWhy lists, for each target not met, its cause, then the notes of
// the groups with a target not met.
func writeWhy(p func(string, ...any), rows []row, notes map[string]string) {
	var missed []row
	for _, r := range rows {
		if !r.met && r.why != "" {
			missed = append(missed, r)
		}
	}
	if len(missed) == 0 {
		return
	}
	p("### Why a target is not met")
	p("")
	for _, r := range missed {
		p("- **%s, %s**: %s.", r.Group, r.Name, r.why)
	}
	p("")
	var done []string
	for _, r := range missed {
		if n := notes[r.Group]; n != "" && !slices.Contains(done, r.Group) {
			done = append(done, r.Group)
			p("%s", strings.TrimSpace(n))
			p("")
		}
	}
}

// figuresOf is every figure this run measured, by name.
func figuresOf(d data) map[string]figure {
	figs := map[string]figure{}
	for _, part := range []map[string]figure{
		attachFigures(d.attach), moveFigures(d.attach), hookFigures(d.podstart, d.beside), besideFigures(d.beside),
		startupFigures(d.podstart, d.restart), memoryFigures(d.rss), inventoryFigures(d.inventory),
	} {
		for k, v := range part {
			figs[k] = v
		}
	}
	return figs
}

// attachFigures: attach and detach of 1 pod with 1 and 8 devices through
// the pipeline against the kernel's baseline, as ratios of their p50s
// and p99s.
func attachFigures(as []figures.Attach) map[string]figure {
	out := map[string]figure{}
	for _, n := range []int{1, 8} {
		bl, ok1 := find(as, "baseline", n, 1)
		pl, ok2 := find(as, "pipeline", n, 1)
		prov, ok3 := find(as, "provisioner", n, 1)
		gate, ok4 := find(as, "no-hook-exec", n, 1)
		for _, way := range []string{"attach", "detach"} {
			for _, q := range []string{"p50", "p99"} {
				b, x := pick(bl, way, q), pick(pl, way, q)
				if !ok1 || !ok2 || b == 0 {
					continue
				}
				f := figure{value: x / b, shown: fmt.Sprintf("%.2fx (%.1f vs %.1f ms)", x/b, x, b), failed: pl.Failures > 0}
				if ok3 && ok4 && q == "p50" {
					pv, gv := pick(prov, way, q), pick(gate, way, q)
					f.detail = fmt.Sprintf("of the %+.1f ms over the baseline's %.1f, this run's modes split it as: the provisioner's RPCs alone %+.1f ms, "+
						"nri and state beside them %+.1f ms (ListAllocations, the fsynced MarkAttached, the gRPC hops, the gate's wake-up), the gate hook's process %+.1f ms "+
						"(each mode's p50 over the same turns; a share within the noise can come out negative); the provisioner's own time is mostly the kernel's move (below)",
						x-b, b, pv-b, gv-pv, x-gv)
				}
				if ok3 && ok4 && q == "p99" {
					f.detail = "the p50 row's causes, at the tail: each move waits for an RCU grace period, which ends on a timer tick: the slowest moves waited two or three ticks more"
				}
				out[fmt.Sprintf("%s.%s.ratio.%ddev", way, q, n)] = f
			}
		}
	}
	return out
}

func pick(a figures.Attach, way, q string) float64 {
	s := a.Attach
	if way == "detach" {
		s = a.Detach
	}
	if q == "p99" {
		return s.P99
	}
	return s.P50
}

// moveFigures: moves/s of 64 concurrent pods, pipeline against baseline.
func moveFigures(as []figures.Attach) map[string]figure {
	out := map[string]figure{}
	for _, n := range []int{1, 8} {
		bl, ok1 := find(as, "baseline", n, 64)
		pl, ok2 := find(as, "pipeline", n, 64)
		if !ok1 || !ok2 || bl.MovesPerSec == 0 {
			continue
		}
		r := pl.MovesPerSec / bl.MovesPerSec
		f := figure{value: r, shown: fmt.Sprintf("%.2fx (%.1f vs %.1f)", r, pl.MovesPerSec, bl.MovesPerSec)}
		b1, ok1 := find(as, "baseline", n, 1)
		p1, ok2 := find(as, "provisioner", n, 1)
		if ok1 && ok2 && b1.Attach.P50+b1.Detach.P50 > 0 && p1.Attach.P50+p1.Detach.P50 > 0 {
			// The kernel moves one link at a time (RTNL), so a saturated
			// node moves about 2 links per attach-and-detach of one.
			pb := 2 * float64(n) * 1000 / (b1.Attach.P50 + b1.Detach.P50)
			pp := 2 * float64(n) * 1000 / (p1.Attach.P50 + p1.Detach.P50)
			f.detail = fmt.Sprintf("the kernel moves links one at a time (RTNL), so the rate is set by each lifecycle's time in the kernel: "+
				"this run's 1-pod attach and detach predict %.1f moves/s for the baseline and %.1f for the provisioner (%.2fx); the provisioner's "+
				"time is mostly its kernel move (see the attach latency rows)", pb, pp, pp/pb)
		}
		out[fmt.Sprintf("moves.ratio.64pods.%ddev", n)] = f
	}
	return out
}

// hookFigures: nri's RunPodSandbox and StopPodSandbox on the real node
// (the mean over each phase of the pod startup benchmark and of the beside
// benchmark, whose pods have 8 devices, from nri's own metrics; the worst
// phase), in ms.
func hookFigures(ps []figures.PodStart, bs []figures.Beside) map[string]figure {
	out := map[string]figure{}
	for _, hook := range []string{"RunPodSandbox", "StopPodSandbox"} {
		worst, where := -1.0, ""
		for _, x := range ps {
			if v, ok := x.Hooks["nri "+hook]; ok && v > worst {
				worst, where = v, phaseName(x)
			}
		}
		for _, x := range bs {
			if v, ok := x.Hooks["nri "+hook]; ok && v > worst {
				worst, where = v, besideName(x)
			}
		}
		if worst >= 0 {
			out["nri."+hook+".mean"] = figure{value: worst, shown: fmt.Sprintf("%.1f ms (%s)", worst, where)}
		}
	}
	return out
}

func phaseName(x figures.PodStart) string {
	claim := "without a claim"
	if x.Claim {
		claim = "with a claim"
	}
	way := "one after the other"
	if x.Way == "burst" {
		way = "burst"
	}
	return fmt.Sprintf("%d pods %s, %s", x.Pods, way, claim)
}

func findStart(ps []figures.PodStart, way string, claim bool) (figures.PodStart, bool) {
	i := slices.IndexFunc(ps, func(x figures.PodStart) bool { return x.Way == way && x.Claim == claim && x.Failures == 0 })
	if i < 0 {
		return figures.PodStart{}, false
	}
	return ps[i], true
}

// kubernetesShare is what a claim adds at P50, one after the other,
// before netdra is asked anything: the control plane's (the claim made
// from the template and allocated: bound) and the kubelet's own handling
// of the claim (the step to the sandbox, less dra's mean prepare: the
// kubelet reads the claim and checkpoints it around the call).
func kubernetesShare(plain, claim figures.PodStart) (string, bool) {
	prep, ok := claim.Hooks["dra prepare"]
	if !ok || claim.Sandbox.N == 0 || plain.Sandbox.N == 0 {
		return "", false
	}
	cp := stepP50(claim, 0) - stepP50(plain, 0)
	kubelet := stepP50(claim, 1) - stepP50(plain, 1) - prep
	return fmt.Sprintf("of it %+.0f ms the control plane's and %+.0f ms the kubelet's own, before netdra's calls", cp, kubelet), true
}

// startupFigures: pod startup on the real node, with a claim against
// without, and the kubelet's restart.
func startupFigures(ps []figures.PodStart, rs []figures.KubeletRestart) map[string]figure {
	out := map[string]figure{}
	plain, ok1 := findStart(ps, "serial", false)
	claim, ok2 := findStart(ps, "serial", true)
	if ok1 && ok2 {
		d := claim.Ready.P50 - plain.Ready.P50
		got := fmt.Sprintf("%+.0f ms (%.0f vs %.0f ms, %d pods)", d, claim.Ready.P50, plain.Ready.P50, claim.Pods)
		if k, ok := kubernetesShare(plain, claim); ok {
			got += "; " + k
		}
		f := figure{value: d, shown: got}
		if claim.ContainerStarted.N > 0 && plain.ContainerStarted.N > 0 {
			var parts []string
			for i, st := range stages {
				parts = append(parts, fmt.Sprintf("%s %+.0f", st.name, stepP50(claim, i)-stepP50(plain, i)))
			}
			f.detail = fmt.Sprintf("a claim adds a step on each part of the pod's path (ms, P50): %s. Bound is the control plane's (the claim made "+
				"from its template and allocated); the sandbox begins after the kubelet prepared the claim through dra (%.0f ms mean), which "+
				"DRA puts before the sandbox; the container starts after runc ran the claim's hook (dra's check-netns, which waits on nri's "+
				"gate: one process) and the attach ended. Each is on the path by the design of DRA and of the fail-closed gate", strings.Join(parts, ", "), claim.Hooks["dra prepare"])
		}
		out["podstart.serial.claim.delta"] = f
	}
	plain, ok1 = findStart(ps, "burst", false)
	claim, ok2 = findStart(ps, "burst", true)
	if ok1 && ok2 && plain.Ready.P50 > 0 {
		for _, q := range []string{"P50", "P99"} {
			a, b := claim.Ready.P50, plain.Ready.P50
			if q == "P99" {
				a, b = claim.Ready.P99, plain.Ready.P99
			}
			out["podstart.burst."+strings.ToLower(q)+".ratio"] = figure{value: a / b, shown: fmt.Sprintf("%.2fx (%.2f vs %.2f s, %d pods)", a/b, a/1000, b/1000, claim.Pods)}
		}
	}
	if len(rs) == 0 {
		return out
	}
	r := rs[len(rs)-1]
	got := fmt.Sprintf("slices %.2f s, pod Running %.2f s", r.SlicesBackSeconds, r.PodRunningSeconds)
	f := figure{value: max(r.SlicesBackSeconds, r.PodRunningSeconds)}
	if r.PlainRunningSeconds > 0 {
		got += fmt.Sprintf(" (a pod without a claim beside it: %.2f s, the kubelet's own)", r.PlainRunningSeconds)
		f.detail = fmt.Sprintf("the restarted kubelet's own time: a pod without a claim, created at the same moment, ran after %.2f s "+
			"(the kubelet watches its pods only once its Node informer synced, which it checks once a second, then polls the pod's "+
			"volumes every 300 ms); the slices were back after %.2f s and the claim added %+.0f ms", r.PlainRunningSeconds, r.SlicesBackSeconds,
			(r.PodRunningSeconds-r.PlainRunningSeconds)*1000)
	}
	f.shown = got
	out["kubelet.restart"] = f
	return out
}

// memoryFigures: each process's peak RSS of each phase, in MiB, named
// rss.<process>.<phase> (the phase's spaces as dashes).
func memoryFigures(rs []figures.RSS) map[string]figure {
	out := map[string]figure{}
	for _, r := range rs {
		m := mib(r.RSSKiB)
		k := "rss." + r.Process + "." + strings.ReplaceAll(r.Phase, " ", "-")
		if prev, ok := out[k]; !ok || m > prev.value {
			out[k] = figure{value: m, shown: fmt.Sprintf("%.1f MiB", m)}
		}
	}
	return out
}

// inventoryFigures: the time to publish an inventory of each size, the
// median of its rounds, in seconds.
func inventoryFigures(inv []figures.Inventory) map[string]figure {
	out := map[string]figure{}
	for _, x := range slices.SortedFunc(slices.Values(inv), func(a, b figures.Inventory) int { return cmp.Compare(a.Devices, b.Devices) }) {
		out[fmt.Sprintf("inventory.%ddev.seconds", x.Devices)] = figure{value: x.Seconds,
			shown: fmt.Sprintf("%.2f s (median of %d rounds: %s)", x.Seconds, len(x.RoundsMs), seconds(x.RoundsMs))}
	}
	return out
}
