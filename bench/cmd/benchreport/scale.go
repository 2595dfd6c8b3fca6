package main

import (
	"cmp"
	"fmt"
	"image/color"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/netdra/netdra/bench/figures"
)

// The scale section's markers: make bench-scale replaces what is between
// them, make bench carries it over.
const (
	scaleBegin = "<!-- scale:begin (make bench-scale writes this section) -->"
	scaleEnd   = "<!-- scale:end -->"
)

// scaleSection returns the scale section of a report (markers included),
// "" when it has none.
func scaleSection(report string) string { return markedSection(report, scaleBegin, scaleEnd) }

// spliceScale puts section in report in place of its scale section, or at
// its end.
func spliceScale(report, section string) string {
	return spliceMarked(report, section, scaleBegin, scaleEnd)
}

// runScale rewrites only the scale section of out from the Scale records
// in in, and the scale plot.
func runScale(in, out, png, targetsFile string, elapsed time.Duration) error {
	ts, err := readTargets(targetsFile)
	if err != nil {
		return err
	}
	runs, err := figures.Read[figures.Scale](in, figures.ScaleFile)
	if err != nil {
		return err
	}
	if len(runs) == 0 {
		return fmt.Errorf("no scale records in %s", in)
	}
	slices.SortFunc(runs, func(a, b figures.Scale) int { return a.Nodes - b.Nodes })
	if err := writeScalePlot(png, runs); err != nil {
		return fmt.Errorf("scale plot: %w", err)
	}
	var b strings.Builder
	if err := writeScale(func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }, runs, ts.ScaleGoals, filepath.Base(png), elapsed); err != nil {
		return err
	}
	old, err := os.ReadFile(out)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	return os.WriteFile(out, []byte(spliceScale(string(old), strings.TrimRight(b.String(), "\n"))), 0o644)
}

// netdraWrites are the resources netdra's dra and operator write.
var netdraWrites = []string{"resourceslices", "nodeconfigs", "events", "resourceclaims", "clusterconfigs"}

func writeScale(p func(string, ...any), runs []figures.Scale, goals []scaleGoal, png string, elapsed time.Duration) error {
	p("%s", scaleBegin)
	writeScaleIntro(p, runs, png, elapsed)
	hdr := "| | " + strings.Join(mapRuns(runs, func(r figures.Scale) string { return fmt.Sprintf("N = %d", r.Nodes) }), " | ") + " |"
	p("%s", hdr)
	p("|---|%s", strings.Repeat("---|", len(runs)))
	for _, rw := range scaleRows(runs) {
		p("| %s | %s |", rw.name, strings.Join(mapRuns(runs, rw.f), " | "))
	}
	p("")
	p("The change: %s. Scheduling: %s", runs[0].ChangeWhat, schedNotes(runs))
	p("")
	if err := writeScaleGoals(p, runs, goals); err != nil {
		return err
	}
	writeChangeCause(p, runs)
	writeSchedCause(p, runs)
	p("%s", scaleEnd)
	return nil
}

// writeChangeCause says where the ClusterConfig change's time went, from
// the figures: the operator's writes, its client's rate-limiter wait,
// what each node wrote, and the CPU the control plane got.
func writeChangeCause(p func(string, ...any), runs []figures.Scale) {
	var lines []string
	for _, r := range runs {
		total := max(r.ChangeAppliedMaxS, r.ChangeSlicesMaxS)
		if total == 0 {
			continue
		}
		client := fmt.Sprintf("its client waited %.1f s in all for its rate limiter", r.OperatorChangeRateWaitS)
		if r.OperatorChangeRequests == 0 {
			client = "its client's figures went with its exits"
		}
		line := fmt.Sprintf("N = %d: the operator wrote the last NodeConfig at %s s (%s; it exited %d times, the first as the exits row says; "+
			"a restarted operator waits for its old Lease to expire), "+
			"the last node republished at %s s; each node's writes over the change: %s; the control plane's process used %.0f s of CPU in those %.0f s (%.2f cores), the simulation's %.0f s",
			r.Nodes, secs(r.ChangeWrittenMaxS), client, r.OperatorExits, secs(total), perNodeWrites(r.ChangeWrites),
			r.ChangeCPCPUS, total, r.ChangeCPCPUS/total, r.ChangeSimCPUS)
		if r.ChangeSliceWrites > 0 {
			line += fmt.Sprintf("; its %.0f ResourceSlice creates and deletes took %.2f s each in the apiserver (mean), "+
				"of which %.2f s waiting on etcd, which the process holds", r.ChangeSliceWrites, r.ChangeSliceWriteS, r.ChangeSliceEtcdS)
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	p("Where the ClusterConfig change's time went: %s.", strings.Join(lines, ". "))
	p("")
}

// schedCount is how many pods of kind a run placed.
func schedCount(r figures.Scale, kind string) float64 {
	if strings.HasPrefix(kind, "2 VFs") {
		return float64(r.SchedPods / 2)
	}
	return float64(r.SchedPods)
}

// schedTook is how long kind's pods took, from the first created to the
// last bound, s.
func schedTook(r figures.Scale, kind string) float64 {
	if v := r.SchedPodsPerSec[kind]; v > 0 {
		return schedCount(r, kind) / v
	}
	return 0
}

// writeSchedCause says, from the figures, what bounds the scheduling of
// pods with a claim: the clients' rate limits (the round with them raised
// is faster) or the control plane's CPU (it is not: the CPU per pod and
// the cores the process got set the rate).
func writeSchedCause(p func(string, ...any), runs []figures.Scale) {
	const claim, none, raised = "1 VF claim", "no claim", " (limits raised)"
	var lines []string
	for _, r := range runs {
		def, ok := r.SchedPodsPerSec[claim]
		if !ok || r.SchedCPCPUS[claim] == 0 {
			continue
		}
		msPod := 1000 * r.SchedCPCPUS[claim] / schedCount(r, claim)
		msNone := 1000 * r.SchedCPCPUS[none] / max(schedCount(r, none), 1)
		cores := r.SchedCPCPUS[claim] / max(schedTook(r, claim), 1e-9)
		line := fmt.Sprintf("N = %d: a pod with a 1 VF claim cost the control plane's process %.0f ms of CPU (one without a claim %.0f ms), "+
			"which got %.2f cores while they were placed, a ceiling of %.0f pods/s; its clients waited %.0f s in all for their rate limiters",
			r.Nodes, msPod, msNone, cores, 1000*cores/max(msPod, 1e-9), r.SchedRateWaitS[claim])
		if up, ok := r.SchedPodsPerSec[claim+raised]; ok {
			line += fmt.Sprintf("; with the controller-manager's and scheduler's limits raised to %.0f/s, %.0f pods/s against %.0f (%s)",
				r.SchedComponentQPS, up, def, map[bool]string{true: "the limits bound it", false: "the limits do not bound it: the CPU does"}[up >= 1.5*def])
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		return
	}
	p("What bounds the scheduling of pods with a claim here, from the figures above (the process holds etcd, the apiserver,")
	p("the controller-manager and the scheduler; a pod with a claim template costs the controller-manager two writes, the")
	p("claim and the pod's `status.resourceClaimStatuses`, and the scheduler two, the claim's allocation and the binding,")
	p("each a write through the apiserver and etcd): %s.", strings.Join(lines, ". "))
	p("Upstream's scheduler_perf runs its components with clients at 5000/s on dedicated cores.")
	p("")
}

// scaleFigureNames are the figures scaleFigures measures.
var scaleFigureNames = []string{"rest.writes", "change.seconds", "sched.claim", "sched.claim.raised"}

// scaleFigures are a run's figures the scale goals name:
//
// rest.writes: netdra's writes per node per hour at rest, before and after
// the change (failed: no window at rest).
//
// change.seconds: the ClusterConfig change, until every node applied it
// and republished (seconds: as the table shows it), failed with missing
// nodes or no slices republished.
//
// sched.claim, sched.claim.raised: pods with a 1 VF claim scheduled a
// second, plain those without a claim, with the clients' limits as they
// are and raised; absent when not measured.
func scaleFigures(r figures.Scale) map[string]figure {
	change := max(r.ChangeAppliedMaxS, r.ChangeSlicesMaxS)
	out := map[string]figure{
		"rest.writes": {value: netdraTotal(r.WritesPerNodeHour) + netdraTotal(r.WritesPerNodeHourAfterChange), failed: r.RestWindowS == 0},
		"change.seconds": {value: change, failed: r.ChangeNodesMissing > 0 || r.ChangeSlicesMaxS == 0,
			vars: map[string]any{"seconds": secs(change), "missing": r.ChangeNodesMissing}},
	}
	for name, suffix := range map[string]string{"sched.claim": "", "sched.claim.raised": " (limits raised)"} {
		if v, ok := r.SchedPodsPerSec["1 VF claim"+suffix]; ok {
			out[name] = figure{value: v, vars: map[string]any{"plain": r.SchedPodsPerSec["no claim"+suffix]}}
		}
	}
	return out
}

// writeScaleGoals writes the goals' table: the goals of every run, run by
// run, then for each run the goals of that run.

// writeScaleIntro writes the section's title and what the runs were.
func writeScaleIntro(p func(string, ...any), runs []figures.Scale, png string, elapsed time.Duration) {
	p("## Scale: simulated nodes against one control plane")
	p("")
	p("Generated by `make bench-scale` on %s (the run took %s; load average %s). Regenerate with",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), elapsed.Round(time.Second), loads(runs))
	p("`make bench-scale SCALE_NODES=\"100 500 1000\"` (as root). The machine had %d cores; the load averages say how", runs[0].Cores)
	p("busy it was besides. Every figure is one sample.")
	p("")
	p("What runs (`shared/testinfra/testworld/scale`): the test world's real etcd, kube-apiserver, kube-controller-manager")
	p("and kube-scheduler (one process), netdra's real operator (its own process, leader election on), and N simulated")
	p("nodes: Node objects without a kubelet, each with netdra's real dra agent (NodeConfig watcher and status writer,")
	p("inventory pump, slice publisher, claim recovery, the kubelet plugin helper) over its own real state service and a")
	p("fake provisioner serving %s. A loop stands in for the kubelet's plugin", runs[0].Inventory)
	p("registration; nothing prepares claims (no kubelet runs pods), so the claims' path is the scheduler's and the")
	p("controller-manager's. Shared: %s; the apiserver sees N separate dra clients.", runs[0].Shared)
	p("Writes and watches come from the apiserver's own `/metrics` (`apiserver_request_total` diffed over the window,")
	p("`apiserver_longrunning_requests`); the baseline is the same cluster (the Nodes, no netdra) over half the window.")
	p("")
	p("![scale](%s)", png)
	p("")
}

// scaleRow is a row of the scale table: its name and each run's cell.
type scaleRow struct {
	name string
	f    func(r figures.Scale) string
}

// scaleRows are the scale table's rows, at rest, over the change, over
// the scheduling and of the footprint, in the table's order.
func scaleRows(runs []figures.Scale) []scaleRow {
	var out []scaleRow
	row := func(name string, f func(r figures.Scale) string) { out = append(out, scaleRow{name, f}) }
	row("every NodeConfig applied and slices published, from the ClusterConfig (s)", func(r figures.Scale) string { return secs(r.StartupS) })
	for _, res := range netdraWrites {
		row(fmt.Sprintf("writes per node per hour at rest: %s", res), func(r figures.Scale) string { return perHour(r, res) })
	}
	row("writes per node per hour at rest: everything else, less the baseline", func(r figures.Scale) string { return otherWrites(r) })
	row("netdra's writes per node per hour at rest after the change (address pools in force)", func(r figures.Scale) string {
		if r.WritesPerNodeHourAfterChange == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f", netdraTotal(r.WritesPerNodeHourAfterChange))
	})
	row("open watches added per node (resource: watches)", func(r figures.Scale) string { return watchesPerNode(r) })
	row("requests per node while the nodes started (LIST and GET)", func(r figures.Scale) string { return startupReads(r) })
	row("ClusterConfig change: NodeConfigs written by the operator, P50 / all (s)", func(r figures.Scale) string {
		return fmt.Sprintf("%s / %s", secs(r.ChangeWrittenP50S), secs(r.ChangeWrittenMaxS))
	})
	row("ClusterConfig change: NodeConfigs applied, P50 / all (s)", func(r figures.Scale) string {
		return fmt.Sprintf("%s / %s", secs(r.ChangeAppliedP50S), secs(r.ChangeAppliedMaxS))
	})
	row("ClusterConfig change: slices republished, P50 / all (s)", func(r figures.Scale) string {
		return fmt.Sprintf("%s / %s", secs(r.ChangeSlicesP50S), secs(r.ChangeSlicesMaxS))
	})
	row("operator CPU: at rest (s per hour) / the change (s)", func(r figures.Scale) string {
		return fmt.Sprintf("%.1f / %.2f", r.OperatorRestCPUS*3600/max(r.RestWindowS, 1), r.OperatorChangeCPUS)
	})
	row("ClusterConfig change: apiserver writes per node until the last node republished (resource VERB)", func(r figures.Scale) string { return perNodeWrites(r.ChangeWrites) })
	row("ClusterConfig change: the operator's client, requests; s in flight; s waiting for its rate limiter (summed)", func(r figures.Scale) string {
		if r.OperatorChangeRequests == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f; %.1f; %.1f", r.OperatorChangeRequests, r.OperatorChangeRequestS, r.OperatorChangeRateWaitS)
	})
	row("ClusterConfig change: CPU s of the control plane / of the simulation (every node's dra) over it", func(r figures.Scale) string {
		if r.ChangeCPCPUS == 0 {
			return "-"
		}
		return fmt.Sprintf("%.0f / %.0f", r.ChangeCPCPUS, r.ChangeSimCPUS)
	})
	row("operator RSS / peak (MiB)", func(r figures.Scale) string {
		if r.OperatorRSSMiB == 0 && r.OperatorExits > 0 {
			return "- (between an exit and its restart when read)"
		}
		return fmt.Sprintf("%.0f / %.0f", r.OperatorRSSMiB, r.OperatorPeakMiB)
	})
	row("operator exits (started again, as its Deployment would)", func(r figures.Scale) string {
		if r.OperatorExits == 0 {
			return "0"
		}
		return fmt.Sprintf("%d (first: %s)", r.OperatorExits, oneLine(r.OperatorExit))
	})
	return append(out, schedRows(runs)...)
}

// schedRows are the scale table's rows of the scheduling, the footprint
// and what broke.
func schedRows(runs []figures.Scale) []scaleRow {
	var out []scaleRow
	row := func(name string, f func(r figures.Scale) string) { out = append(out, scaleRow{name, f}) }
	for _, k := range schedKinds(runs) {
		row("scheduling, pods/s: "+k, func(r figures.Scale) string {
			if v, ok := r.SchedPodsPerSec[k]; ok {
				return fmt.Sprintf("%.0f", v)
			}
			return "-"
		})
	}
	row("scheduling: the control plane's CPU per pod, ms; cores it used (by kind)", func(r figures.Scale) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.SchedCPCPUS)) {
			n, took := schedCount(r, k), schedTook(r, k)
			if n == 0 || took == 0 {
				continue
			}
			parts = append(parts, fmt.Sprintf("%s %.0f; %.2f", k, 1000*r.SchedCPCPUS[k]/n, r.SchedCPCPUS[k]/took))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ", ")
	})
	row("scheduling: the control plane's clients' rate-limiter wait, s summed (by kind)", func(r figures.Scale) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(r.SchedRateWaitS)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, r.SchedRateWaitS[k]))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, ", ")
	})
	row("etcd in use: Nodes only / with netdra (MiB); per node (KiB)", func(r figures.Scale) string {
		return fmt.Sprintf("%.1f / %.1f; %.1f", r.EtcdBaselineBytes/(1<<20), r.EtcdBytes/(1<<20), (r.EtcdBytes-r.EtcdBaselineBytes)/1024/float64(r.Nodes))
	})
	row("control plane process RSS: Nodes only / with netdra (MiB); Go heap in use", func(r figures.Scale) string {
		return fmt.Sprintf("%.0f / %.0f; %.0f", r.CPBaselineRSSMiB, r.CPRSSMiB, r.CPHeapMiB)
	})
	row("the simulation's process: RSS (MiB), per node; CPU at rest (s per hour per node)", func(r figures.Scale) string {
		return fmt.Sprintf("%.0f, %.1f; %.2f", r.SimRSSMiB, r.SimRSSMiB/float64(r.Nodes), r.SimRestCPUS*3600/max(r.RestWindowS, 1)/float64(r.Nodes))
	})
	row("what broke", func(r figures.Scale) string {
		if r.Failure == "" {
			return "nothing"
		}
		return "**" + strings.ReplaceAll(r.Failure, "|", "/") + "**"
	})
	return out
}

func writeScaleGoals(p func(string, ...any), runs []figures.Scale, goals []scaleGoal) error {
	p("| goal | wanted | measured | |")
	p("|---|---|---|---|")
	type at struct {
		g scaleGoal
		r figures.Scale
	}
	var rows []at
	for _, g := range goals {
		for _, r := range runs {
			if g.Nodes == 0 {
				rows = append(rows, at{g, r})
			}
		}
	}
	largest := runs[len(runs)-1].Nodes
	for _, r := range runs {
		for _, g := range goals {
			if g.Nodes != 0 && (r.Nodes == g.Nodes || g.OrLargest && r.Nodes == largest) {
				rows = append(rows, at{g, r})
			}
		}
	}
	for _, x := range rows {
		f, ok := scaleFigures(x.r)[x.g.Figure]
		if !ok {
			continue
		}
		vars := map[string]any{"value": f.value, "nodes": x.r.Nodes}
		maps.Copy(vars, f.vars)
		name, err1 := sentence(x.g.Name, vars)
		measured, err2 := sentence(x.g.Measured, vars)
		if err := cmp.Or(err1, err2); err != nil {
			return fmt.Errorf("scale goal %q: %w", x.g.Name, err)
		}
		v := metIf(*compare(x.g.Compare, f.value, x.g.Value) && !f.failed)
		if x.r.Nodes < x.g.Nodes {
			v = "**not measured at " + thousands(x.g.Nodes) + "**"
		}
		p("| %s | %s | %s | %s |", name, x.g.Wanted, measured, v)
	}
	p("")
	return nil
}

// thousands is n with a comma between each group of three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// perNodeWrites lists m's writes ("resource VERB": count per node),
// largest first, those of at least 0.05.
func perNodeWrites(m map[string]float64) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	var parts []string
	for _, k := range keys {
		if m[k] >= 0.05 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// oneLine is s on one line, without table separators, at most 160
// characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(strings.ReplaceAll(s, "|", "/")), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

func metIf(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func mapRuns(runs []figures.Scale, f func(figures.Scale) string) []string {
	out := make([]string, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

func secs(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", s)
}

func loads(runs []figures.Scale) string {
	return strings.Join(mapRuns(runs, func(r figures.Scale) string { return r.Load }), ", ")
}

// netdraTotal is the writes of netdra's resources in m.
func netdraTotal(m map[string]float64) float64 {
	total := 0.0
	for _, res := range netdraWrites {
		total += writesIn(m, res)
	}
	return total
}

// writesOf is the netdra window's writes of resource (and its
// subresources) less the baseline's, per node per hour.
func writesOf(r figures.Scale, resource string) float64 {
	return writesIn(r.WritesPerNodeHour, resource)
}

func writesIn(m map[string]float64, resource string) float64 {
	total := 0.0
	for k, v := range m {
		res, _, _ := strings.Cut(k, " ")
		if res == resource || strings.HasPrefix(res, resource+"/") {
			total += v
		}
	}
	return total
}

func perHour(r figures.Scale, resource string) string {
	if r.RestWindowS == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", writesOf(r, resource))
}

func otherWrites(r figures.Scale) string {
	if r.RestWindowS == 0 {
		return "-"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.WritesPerNodeHour)) {
		res, _, _ := strings.Cut(k, " ")
		if slices.ContainsFunc(netdraWrites, func(n string) bool { return res == n || strings.HasPrefix(res, n+"/") }) {
			continue
		}
		if v := r.WritesPerNodeHour[k]; v != 0 {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
		}
	}
	if len(parts) == 0 {
		return "0"
	}
	return strings.Join(parts, ", ")
}

func watchesPerNode(r figures.Scale) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.Watches)) {
		if d := r.Watches[k] - r.BaselineWatches[k]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s %.2f", k, d/float64(r.Nodes)))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func startupReads(r figures.Scale) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(r.StartupRequests)) {
		if strings.HasSuffix(k, " LIST") || strings.HasSuffix(k, " GET") {
			if v := r.StartupRequests[k] / float64(r.Nodes); v >= 0.05 {
				parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
			}
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func schedKinds(runs []figures.Scale) []string {
	seen := map[string]bool{}
	for _, r := range runs {
		for k := range r.SchedPodsPerSec {
			seen[k] = true
		}
	}
	return slices.Sorted(maps.Keys(seen))
}

func schedNotes(runs []figures.Scale) string {
	var parts []string
	for _, r := range runs {
		if r.SchedNote != "" {
			parts = append(parts, fmt.Sprintf("N = %d: %s", r.Nodes, strings.TrimSuffix(strings.TrimSpace(r.SchedNote), ";")))
		}
	}
	return strings.Join(parts, ". ")
}

// writeScalePlot draws four panels against N: the ClusterConfig change,
// the scheduling rate, memory, etcd's size.
func writeScalePlot(path string, runs []figures.Scale) error {
	panel := func(title, y string, ss []scaleSeries) (*plot.Plot, error) {
		p := plot.New()
		p.Title.Text = title
		p.Title.TextStyle.Font.Size = vg.Points(13)
		p.X.Label.Text, p.Y.Label.Text = "simulated nodes", y
		p.Y.Min = 0
		g := plotter.NewGrid()
		g.Vertical.Color, g.Horizontal.Color = color.Gray{Y: 225}, color.Gray{Y: 225}
		p.Add(g)
		p.Legend.Top, p.Legend.Left = true, true
		for i, s := range ss {
			var xys plotter.XYs
			for _, r := range runs {
				if v, ok := s.f(r); ok {
					xys = append(xys, plotter.XY{X: float64(r.Nodes), Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			c := palette[i%len(palette)]
			l.Color, l.Width, pts.Color = c, vg.Points(1.8), c
			p.Add(l, pts)
			p.Legend.Add(s.name, l, pts)
		}
		return p, nil
	}
	pos := func(v float64) (float64, bool) { return v, v > 0 }
	specs := []struct {
		title, y string
		ss       []scaleSeries
	}{
		{"ClusterConfig change to every node", "seconds", []scaleSeries{
			{"NodeConfigs applied", func(r figures.Scale) (float64, bool) { return pos(r.ChangeAppliedMaxS) }},
			{"slices republished", func(r figures.Scale) (float64, bool) { return pos(r.ChangeSlicesMaxS) }}}},
		{"scheduling throughput", "pods/s", schedSeries(runs)},
		{"memory", "MiB", []scaleSeries{
			{"control plane process", func(r figures.Scale) (float64, bool) { return pos(r.CPRSSMiB) }},
			{"control plane, Nodes only", func(r figures.Scale) (float64, bool) { return pos(r.CPBaselineRSSMiB) }},
			{"operator", func(r figures.Scale) (float64, bool) { return pos(r.OperatorRSSMiB) }}}},
		{"etcd in use", "MiB", []scaleSeries{
			{"with netdra", func(r figures.Scale) (float64, bool) { return pos(r.EtcdBytes / (1 << 20)) }},
			{"Nodes only", func(r figures.Scale) (float64, bool) { return pos(r.EtcdBaselineBytes / (1 << 20)) }}}},
	}
	var row []*plot.Plot
	for _, s := range specs {
		pl, err := panel(s.title, s.y, s.ss)
		if err != nil {
			return err
		}
		row = append(row, pl)
	}
	return save(path, [][]*plot.Plot{row[:2], row[2:]})
}

// scaleSeries is one line of a scale panel: its name and its value at a
// run (false: none).
type scaleSeries struct {
	name string
	f    func(figures.Scale) (float64, bool)
}

// schedSeries is one line per kind of pod.
func schedSeries(runs []figures.Scale) []scaleSeries {
	var out []scaleSeries
	for _, k := range schedKinds(runs) {
		out = append(out, scaleSeries{k, func(r figures.Scale) (float64, bool) { v, ok := r.SchedPodsPerSec[k]; return v, ok }})
	}
	return out
}

var palette = []color.Color{color.RGBA{R: 31, G: 119, B: 180, A: 255}, color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255}, color.RGBA{R: 148, G: 103, B: 189, A: 255}}
