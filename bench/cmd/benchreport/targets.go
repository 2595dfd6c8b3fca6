package main

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/netdra/netdra/bench/figures"
)

// targets is the targets file (bench/targets.yaml): which measured figure
// is wanted where, and the sentences the report says of it. The report
// sets each beside this run's figure.
type targets struct {
	Targets []target `json:"targets"`
	// GroupNotes are printed once, after the causes, when a target of
	// their group is not met.
	GroupNotes map[string]string `json:"groupNotes,omitempty"`
	// Causes is the markdown of the report's section on what the code
	// says about the gaps to the targets, printed as it is.
	Causes string `json:"causes,omitempty"`
	// ScaleGoals are the goals of make bench-scale's section.
	ScaleGoals []scaleGoal `json:"scaleGoals,omitempty"`
	// ColdCIMinutes is the budget of a cold .ci/run on a fresh machine,
	// which the cold CI section compares its run's time with.
	ColdCIMinutes int `json:"coldCIMinutes,omitempty"`
}

// scaleGoal is a goal of the scale section: a row for each run it names,
// every run (Nodes 0), or the run at Nodes and, with OrLargest, the
// largest run, which, smaller than Nodes, is not measured at Nodes. Name
// and Measured are templates over the values of the run's figure (its
// vars, value and nodes); a run without the figure has no row.
type scaleGoal struct {
	Name      string  `json:"name"`
	Figure    string  `json:"figure"`
	Nodes     int     `json:"nodes,omitempty"`
	OrLargest bool    `json:"orLargest,omitempty"`
	Compare   string  `json:"compare"`
	Value     float64 `json:"value"`
	Wanted    string  `json:"wanted"`
	Measured  string  `json:"measured"`
}

// target is one line of the targets table. Measured and Why are
// text/template templates over the values of the target's figure (its
// vars, and value: the figure compared); a value the figure does not have
// is an error.
type target struct {
	Group   string  `json:"group"`
	Name    string  `json:"name"`
	Figure  string  `json:"figure"`
	Compare string  `json:"compare"`
	Value   float64 `json:"value"`
	Unit    string  `json:"unit"`
	// Measured is the measured column.
	Measured string `json:"measured"`
	// Why is the cause, from this run's figures, the code or an earlier
	// investigation, that keeps the target out of reach; printed when it
	// is not met and not empty.
	Why string `json:"why,omitempty"`
}

// figurePatterns are the names of the figures figuresOf can measure; a
// target naming another is refused.
var figurePatterns = []*regexp.Regexp{
	regexp.MustCompile(`^(attach|detach)\.(p50|p99)\.ratio\.[0-9]+dev$`),
	regexp.MustCompile(`^moves\.ratio\.64pods\.[0-9]+dev$`),
	regexp.MustCompile(`^nri\.(RunPodSandbox|StopPodSandbox)\.mean$`),
	regexp.MustCompile(`^beside\.(kubelet\.delay|hooks\.mean)$`),
	regexp.MustCompile(`^podstart\.(serial\.claim\.delta|serial\.p50\.ratio|burst\.p50\.ratio|burst\.p99\.ratio)$`),
	regexp.MustCompile(`^prepare\.p50\.[0-9]+dev$`),
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
		case t.Measured == "":
			return targets{}, fmt.Errorf("%s: required", field("measured"))
		}
		for f, text := range map[string]string{"measured": t.Measured, "why": t.Why} {
			if _, err := parseSentence(text); err != nil {
				return targets{}, fmt.Errorf("%s: %w", field(f), err)
			}
		}
	}
	for i, g := range ts.ScaleGoals {
		field := func(f string) string { return fmt.Sprintf("%s: scaleGoals[%d].%s", path, i, f) }
		switch {
		case g.Name == "" || g.Wanted == "" || g.Measured == "":
			return targets{}, fmt.Errorf("%s, wanted and measured: required", field("name"))
		case !slices.Contains(scaleFigureNames, g.Figure):
			return targets{}, fmt.Errorf("%s: %q, want one of %s", field("figure"), g.Figure, strings.Join(scaleFigureNames, ", "))
		case compare(g.Compare, 0, 0) == nil:
			return targets{}, fmt.Errorf("%s: %q, want one of <=, <, >=, >", field("compare"), g.Compare)
		}
		for f, text := range map[string]string{"name": g.Name, "measured": g.Measured} {
			if _, err := parseSentence(text); err != nil {
				return targets{}, fmt.Errorf("%s: %w", field(f), err)
			}
		}
	}
	return ts, nil
}

// parseSentence parses a target's template: one that uses a value its
// figure does not have fails when executed.
func parseSentence(text string) (*template.Template, error) {
	return template.New("").Option("missingkey=error").Parse(text)
}

// sentence executes the template text over vars.
func sentence(text string, vars map[string]any) (string, error) {
	t, err := parseSentence(text)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	if err := t.Execute(&b, vars); err != nil {
		return "", err
	}
	return b.String(), nil
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
// unit, whether the run it comes from failed (then no target on it is
// met), and the values the target's sentences may use.
type figure struct {
	value  float64
	failed bool
	vars   map[string]any
}

// row is one line of the targets table: a target, what this run measured
// and whether that meets it; a target of which nothing was measured says
// so and is not met.
type row struct {
	target
	measured string
	met      bool
	absent   bool // nothing measured
	// why is, for a figure measured, the target's cause.
	why string
}

// evaluate sets each target beside its figure of figs, its sentences
// executed over the figure's vars and value.
func evaluate(ts []target, figs map[string]figure) ([]row, error) {
	var out []row
	for i, t := range ts {
		f, ok := figs[t.Figure]
		if !ok {
			out = append(out, row{target: t, measured: "not measured in this run", absent: true})
			continue
		}
		vars := map[string]any{"value": f.value}
		maps.Copy(vars, f.vars)
		r := row{target: t, met: *compare(t.Compare, f.value, t.Value) && !f.failed}
		var err error
		if r.measured, err = sentence(t.Measured, vars); err != nil {
			return nil, fmt.Errorf("targets[%d].measured: %w", i, err)
		}
		if r.why, err = sentence(t.Why, vars); err != nil {
			return nil, fmt.Errorf("targets[%d].why: %w", i, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func writeTargets(p func(string, ...any), d data, ts targets) error {
	rows, err := evaluate(ts.Targets, figuresOf(d))
	if err != nil {
		return err
	}
	p("## Targets, side by side")
	p("")
	p("Each target of bench/targets.yaml with this run's figure; a target this run did not measure says so (and is not met).")
	p("")
	p("| group | target | wanted | measured | |")
	p("|---|---|---|---|---|")
	for _, r := range rows {
		v := verdict(r.met)
		if r.absent {
			v = "not measured"
		}
		p("| %s | %s | %s | %s | %s |", r.Group, r.Name, r.wanted(), r.measured, v)
	}
	p("")
	writeWhy(p, rows, ts.GroupNotes)
	return nil
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
		prepareFigures(d.prepare),
	} {
		for k, v := range part {
			figs[k] = v
		}
	}
	return figs
}

// attachFigures: attach and detach of 1 pod with 1 and 8 devices through
// the pipeline against the kernel's baseline, as ratios of their p50s
// and p99s (pipeline, baseline: ms). With the provisioner and
// no-hook-exec modes measured (split), the pipeline's time over the
// baseline (over) split as theirs: provisioner, nri and hook (ms).
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
				vars := map[string]any{"pipeline": x, "baseline": b, "split": ok3 && ok4}
				if ok3 && ok4 {
					pv, gv := pick(prov, way, q), pick(gate, way, q)
					vars["over"], vars["provisioner"], vars["nri"], vars["hook"] = x-b, pv-b, gv-pv, x-gv
				}
				out[fmt.Sprintf("%s.%s.ratio.%ddev", way, q, n)] = figure{value: x / b, failed: pl.Failures > 0, vars: vars}
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

// moveFigures: moves/s of 64 concurrent pods, pipeline against baseline
// (pipeline, baseline). With the 1-pod runs measured (predicted), the
// rates their attach and detach predict (predictedBaseline,
// predictedProvisioner, predictedRatio).
func moveFigures(as []figures.Attach) map[string]figure {
	out := map[string]figure{}
	for _, n := range []int{1, 8} {
		bl, ok1 := find(as, "baseline", n, 64)
		pl, ok2 := find(as, "pipeline", n, 64)
		if !ok1 || !ok2 || bl.MovesPerSec == 0 {
			continue
		}
		vars := map[string]any{"pipeline": pl.MovesPerSec, "baseline": bl.MovesPerSec, "predicted": false}
		b1, ok1 := find(as, "baseline", n, 1)
		p1, ok2 := find(as, "provisioner", n, 1)
		if ok1 && ok2 && b1.Attach.P50+b1.Detach.P50 > 0 && p1.Attach.P50+p1.Detach.P50 > 0 {
			// The kernel moves one link at a time (RTNL), so a saturated
			// node moves about 2 links per attach-and-detach of one.
			pb := 2 * float64(n) * 1000 / (b1.Attach.P50 + b1.Detach.P50)
			pp := 2 * float64(n) * 1000 / (p1.Attach.P50 + p1.Detach.P50)
			vars["predicted"], vars["predictedBaseline"], vars["predictedProvisioner"], vars["predictedRatio"] = true, pb, pp, pp/pb
		}
		out[fmt.Sprintf("moves.ratio.64pods.%ddev", n)] = figure{value: pl.MovesPerSec / bl.MovesPerSec, vars: vars}
	}
	return out
}

// hookFigures: nri's RunPodSandbox and StopPodSandbox on the real node
// (the mean over each phase of the pod startup benchmark and of the beside
// benchmark, whose pods have 8 devices, from nri's own metrics; the worst
// phase), in ms; where names the phase.
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
			out["nri."+hook+".mean"] = figure{value: worst, vars: map[string]any{"where": where}}
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
	switch x.Way {
	case "burst":
		way = "burst"
	case "burst-raised":
		way = "burst, the control plane's client limits raised"
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

// startupFigures: pod startup on the real node, with a claim against
// without, and the kubelet's restart.
//
// podstart.serial.claim.delta: the P50s one after the other (claim,
// plain: ms) of pods, and, with the runtime's stages measured (stages),
// each stage's step a claim adds (steps: name, delta) and dra's mean
// prepare (prepare). What a claim adds before netdra is asked anything
// (share): the control plane's (controlPlane: the claim made from the
// template and allocated, bound) and the kubelet's own (kubelet: the step
// to the sandbox, less dra's prepare: the kubelet reads the claim and
// checkpoints it around the call).
//
// podstart.burst.p50.ratio, podstart.burst.p99.ratio: the burst's
// percentile with a claim against without (claim, plain: s) of pods;
// with the burst run again with the control plane's client limits raised
// (raised), that run's ratio (raisedRatio), percentiles (raisedClaim,
// raisedPlain: s) and how much later its pods with a claim were bound
// (raisedBoundDelta: s).
//
// kubelet.restart: the last restart's slices back and pod with a claim
// Running (s); plain, a pod without a claim Running (s, 0: not
// measured), and the ms the claim added to it (claimAdds).
func startupFigures(ps []figures.PodStart, rs []figures.KubeletRestart) map[string]figure {
	out := map[string]figure{}
	plain, ok1 := findStart(ps, "serial", false)
	claim, ok2 := findStart(ps, "serial", true)
	if ok1 && ok2 {
		vars := map[string]any{"claim": claim.Ready.P50, "plain": plain.Ready.P50, "pods": claim.Pods, "prepare": claim.Hooks["dra prepare"]}
		_, prep := claim.Hooks["dra prepare"]
		vars["share"] = prep && claim.Sandbox.N > 0 && plain.Sandbox.N > 0
		vars["controlPlane"] = stepP50(claim, 0) - stepP50(plain, 0)
		vars["kubelet"] = stepP50(claim, 1) - stepP50(plain, 1) - claim.Hooks["dra prepare"]
		vars["stages"] = claim.ContainerStarted.N > 0 && plain.ContainerStarted.N > 0
		var steps []map[string]any
		for i, st := range stages {
			steps = append(steps, map[string]any{"name": st.name, "delta": stepP50(claim, i) - stepP50(plain, i)})
		}
		vars["steps"] = steps
		out["podstart.serial.claim.delta"] = figure{value: claim.Ready.P50 - plain.Ready.P50, vars: vars}
		if plain.Ready.P50 > 0 {
			// What DRA itself adds before netdra's calls (the control
			// plane's claim and the kubelet's own handling of it), and
			// the ratio it alone makes: what no driver can take off.
			dra := vars["controlPlane"].(float64) + vars["kubelet"].(float64)
			out["podstart.serial.p50.ratio"] = figure{value: claim.Ready.P50 / plain.Ready.P50,
				vars: map[string]any{"claim": claim.Ready.P50 / 1000, "plain": plain.Ready.P50 / 1000, "pods": claim.Pods,
					"share": vars["share"], "delta": claim.Ready.P50 - plain.Ready.P50, "controlPlane": vars["controlPlane"],
					"kubelet": vars["kubelet"], "prepare": vars["prepare"], "floor": (plain.Ready.P50 + dra) / plain.Ready.P50,
					"netdra": claim.Ready.P50 - plain.Ready.P50 - dra}}
		}
	}
	plain, ok1 = findStart(ps, "burst", false)
	claim, ok2 = findStart(ps, "burst", true)
	rplain, rok1 := findStart(ps, "burst-raised", false)
	rclaim, rok2 := findStart(ps, "burst-raised", true)
	if ok1 && ok2 && plain.Ready.P50 > 0 {
		for _, q := range []string{"P50", "P99"} {
			a, b := quantile(claim.Ready, q), quantile(plain.Ready, q)
			raised := rok1 && rok2 && quantile(rplain.Ready, q) > 0
			vars := map[string]any{"claim": a / 1000, "plain": b / 1000, "pods": claim.Pods, "q": q,
				"bound": claim.Scheduled.N > 0 && plain.Scheduled.N > 0, "delta": (a - b) / 1000,
				"boundDelta": (quantile(claim.Scheduled, q) - quantile(plain.Scheduled, q)) / 1000, "raised": raised}
			if raised {
				ra, rb := quantile(rclaim.Ready, q), quantile(rplain.Ready, q)
				vars["raisedRatio"], vars["raisedClaim"], vars["raisedPlain"] = ra/rb, ra/1000, rb/1000
				vars["raisedBoundDelta"] = (quantile(rclaim.Scheduled, q) - quantile(rplain.Scheduled, q)) / 1000
				vars["raisedQPS"] = rclaim.ComponentQPS
			}
			out["podstart.burst."+strings.ToLower(q)+".ratio"] = figure{value: a / b, vars: vars}
		}
	}
	if len(rs) == 0 {
		return out
	}
	r := rs[len(rs)-1]
	out["kubelet.restart"] = figure{value: max(r.SlicesBackSeconds, r.PodRunningSeconds), vars: map[string]any{"slices": r.SlicesBackSeconds,
		"running": r.PodRunningSeconds, "plain": r.PlainRunningSeconds, "claimAdds": (r.PodRunningSeconds - r.PlainRunningSeconds) * 1000}}
	return out
}

// quantile is the percentile of s that q names: its tail for "P99", else
// its median.
func quantile(s figures.Summary, q string) float64 {
	if q == "P99" {
		return s.P99
	}
	return s.P50
}

// memoryFigures: each process's peak RSS of each phase, in MiB, named
// rss.<process>.<phase> (the phase's spaces and commas as dashes), and
// the processes' together, rss.total.<phase> (each: every process's, in
// the records' order). Each has known, anon and file: whether every
// record it adds up read RssAnon and RssFile, and their sizes.
func memoryFigures(rs []figures.RSS) map[string]figure {
	out := map[string]figure{}
	phase := strings.NewReplacer(", ", "-", ",", "-", " ", "-")
	var procs []string
	for _, r := range rs {
		m := mib(r.RSSKiB)
		k := "rss." + r.Process + "." + phase.Replace(r.Phase)
		if prev, ok := out[k]; !ok || m > prev.value {
			out[k] = figure{value: m, vars: map[string]any{"known": r.AnonKiB+r.FileKiB > 0,
				"anon": mib(r.AnonKiB), "file": mib(r.FileKiB)}}
		}
		if !slices.Contains(procs, r.Process) {
			procs = append(procs, r.Process)
		}
	}
	totals := map[string]figure{}
	for _, r := range rs {
		k := "rss.total." + phase.Replace(r.Phase)
		if _, ok := totals[k]; ok {
			continue
		}
		var sum, anon, file float64
		known := true
		var each []string
		for _, p := range procs {
			if f, ok := out["rss."+p+"."+phase.Replace(r.Phase)]; ok {
				sum += f.value
				each = append(each, fmt.Sprintf("%s %.1f", p, f.value))
				anon, file = anon+f.vars["anon"].(float64), file+f.vars["file"].(float64)
				known = known && f.vars["known"].(bool)
			}
		}
		totals[k] = figure{value: sum, vars: map[string]any{"each": strings.Join(each, ", "), "known": known, "anon": anon, "file": file}}
	}
	maps.Copy(out, totals)
	return out
}

// prepareFigures: the median time of one claim's prepare, back to back,
// by the claim's devices (p99, claims: the same rows').
func prepareFigures(ps []figures.Prepare) map[string]figure {
	out := map[string]figure{}
	for _, p := range ps {
		if p.Paced {
			continue
		}
		out[fmt.Sprintf("prepare.p50.%ddev", p.Devices)] = figure{value: p.Prepare.P50,
			vars: map[string]any{"p99": p.Prepare.P99, "claims": p.Prepare.N}}
	}
	return out
}

// inventoryFigures: the time to publish an inventory of each size, the
// median of its rounds, in seconds; rounds counts them, each lists them.
func inventoryFigures(inv []figures.Inventory) map[string]figure {
	out := map[string]figure{}
	for _, x := range inv {
		out[fmt.Sprintf("inventory.%ddev.seconds", x.Devices)] = figure{value: x.Seconds,
			vars: map[string]any{"rounds": len(x.RoundsMs), "each": seconds(x.RoundsMs)}}
	}
	return out
}
