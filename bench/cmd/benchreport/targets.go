package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/netdra/netdra/bench/figures"
)

// row is one line of the targets table: an issue 21 point, what it wants,
// what this run measured and whether that meets it; a target of which
// nothing was measured says so and is not met.
type row struct {
	point, target, wanted, measured string
	met                             bool
}

func writeTargets(p func(string, ...any), d data) {
	p("## Targets of issue 21, side by side")
	p("")
	p("Each target of issue 21 with this run's figure; a target this run did not measure says so (and is not met).")
	p("")
	p("| point | target | wanted | measured | |")
	p("|---|---|---|---|---|")
	var rows []row
	rows = append(rows, attachTargets(d.attach)...)
	rows = append(rows, moveTargets(d.attach)...)
	rows = append(rows, hookTargets(d.podstart, d.beside)...)
	rows = append(rows, besideTargets(d.beside)...)
	rows = append(rows, startupTargets(d.podstart, d.restart)...)
	rows = append(rows, memoryTargets(d.rss)...)
	rows = append(rows, row{"6", "plots drawn with a kept plotting library, the real-node pod startup beside the attach CDFs",
		"gonum.org/v1/plot", "this report's plot (gonum.org/v1/plot)", true})
	for _, inv := range d.inventory {
		rows = append(rows, row{"issue 10", fmt.Sprintf("%d devices published", inv.Devices), "< 1 s", fmt.Sprintf("%.2f s (median of %d rounds: %s)", inv.Seconds, len(inv.RoundsMs), seconds(inv.RoundsMs)), inv.Seconds < 1})
	}
	for _, r := range rows {
		v := verdict(r.met)
		if strings.HasPrefix(r.measured, "not measured") {
			v = "not measured"
		}
		p("| %s | %s | %s | %s | %s |", r.point, r.target, r.wanted, r.measured, v)
	}
	p("")
}

func notMeasured(point, target, wanted string) row {
	return row{point, target, wanted, "not measured in this run", false}
}

// attachTargets: point 1, attach and detach of 1 pod with 1 and 8
// devices through the pipeline against the kernel's baseline.
func attachTargets(as []figures.Attach) []row {
	var out []row
	for _, n := range []int{1, 8} {
		bl, ok1 := find(as, "baseline", n, 1)
		pl, ok2 := find(as, "pipeline", n, 1)
		for _, way := range []string{"attach", "detach"} {
			for _, q := range []struct {
				name string
				max  float64
			}{{"p50", 1.05}, {"p99", 1.1}} {
				target := fmt.Sprintf("%s %s pipeline/baseline, 1 pod, %d device(s)", way, q.name, n)
				wanted := fmt.Sprintf("<= %.2fx", q.max)
				b, x := pick(bl, way, q.name), pick(pl, way, q.name)
				if !ok1 || !ok2 || b == 0 {
					out = append(out, notMeasured("1", target, wanted))
					continue
				}
				out = append(out, row{"1", target, wanted, fmt.Sprintf("%.2fx (%.1f vs %.1f ms)", x/b, x, b), x/b <= q.max && pl.Failures == 0})
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

// moveTargets: point 2, moves/s of 64 concurrent pods.
func moveTargets(as []figures.Attach) []row {
	var out []row
	for _, n := range []int{1, 8} {
		bl, ok1 := find(as, "baseline", n, 64)
		pl, ok2 := find(as, "pipeline", n, 64)
		target := fmt.Sprintf("moves/s pipeline/baseline, 64 pods x %d device(s)", n)
		if !ok1 || !ok2 || bl.MovesPerSec == 0 {
			if n == 1 {
				out = append(out, notMeasured("2", target, ">= 0.95x"))
			}
			continue
		}
		r := pl.MovesPerSec / bl.MovesPerSec
		out = append(out, row{"2", target, ">= 0.95x", fmt.Sprintf("%.2fx (%.1f vs %.1f)", r, pl.MovesPerSec, bl.MovesPerSec), r >= 0.95})
	}
	return out
}

// hookTargets: point 3, nri's RunPodSandbox and StopPodSandbox on the
// real node (the mean over each phase of the pod startup benchmark and of
// the beside benchmark, whose pods have 8 devices, from nri's own metrics;
// the worst phase).
func hookTargets(ps []figures.PodStart, bs []figures.Beside) []row {
	var out []row
	for _, hook := range []string{"RunPodSandbox", "StopPodSandbox"} {
		target := "nri " + hook + " on the real node, mean per pod (worst phase, nri's metrics)"
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
		if worst < 0 {
			out = append(out, notMeasured("3", target, "<= 2 ms"))
			continue
		}
		out = append(out, row{"3", target, "<= 2 ms", fmt.Sprintf("%.1f ms (%s)", worst, where), worst <= 2})
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

// startupTargets: point 4, pod startup on the real node and the
// kubelet's restart.
func startupTargets(ps []figures.PodStart, rs []figures.KubeletRestart) []row {
	var out []row
	plain, ok1 := findStart(ps, "serial", false)
	claim, ok2 := findStart(ps, "serial", true)
	target := "pod startup one after the other, P50 with a claim - without"
	if ok1 && ok2 {
		d := claim.Ready.P50 - plain.Ready.P50
		got := fmt.Sprintf("%+.0f ms (%.0f vs %.0f ms, %d pods)", d, claim.Ready.P50, plain.Ready.P50, claim.Pods)
		if k, ok := kubernetesShare(plain, claim); ok {
			got += "; " + k
		}
		out = append(out, row{"4", target, "<= +20 ms", got, d <= 20})
	} else {
		out = append(out, notMeasured("4", target, "<= +20 ms"))
	}
	plain, ok1 = findStart(ps, "burst", false)
	claim, ok2 = findStart(ps, "burst", true)
	for _, q := range []string{"P50", "P99"} {
		target := fmt.Sprintf("pod startup in a burst, %s with a claim / without", q)
		if !ok1 || !ok2 || plain.Ready.P50 == 0 {
			out = append(out, notMeasured("4", target, "<= 1.1x"))
			continue
		}
		a, b := claim.Ready.P50, plain.Ready.P50
		if q == "P99" {
			a, b = claim.Ready.P99, plain.Ready.P99
		}
		out = append(out, row{"4", target, "<= 1.1x", fmt.Sprintf("%.2fx (%.2f vs %.2f s, %d pods)", a/b, a/1000, b/1000, claim.Pods), a/b <= 1.1})
	}
	target = "kubelet restart: from its SIGTERM, slices back and a new pod with a claim Running"
	if len(rs) == 0 {
		return append(out, notMeasured("4", target, "< 2 s"))
	}
	r := rs[len(rs)-1]
	worst := max(r.SlicesBackSeconds, r.PodRunningSeconds)
	got := fmt.Sprintf("slices %.2f s, pod Running %.2f s", r.SlicesBackSeconds, r.PodRunningSeconds)
	if r.PlainRunningSeconds > 0 {
		got += fmt.Sprintf(" (a pod without a claim beside it: %.2f s, the kubelet's own)", r.PlainRunningSeconds)
	}
	return append(out, row{"4", target, "< 2 s", got, worst < 2})
}

// memoryTargets: point 5, peak RSS under churn (bench/'s attach
// benchmark) and dra's with 1,024 devices published (benchworld's
// inventory benchmark).
func memoryTargets(rs []figures.RSS) []row {
	var out []row
	for _, want := range []struct {
		process, phase string
		max            float64
	}{{"state", "churn", 30}, {"provisioner", "churn", 30}, {"nri", "churn", 30}, {"dra", "1024 devices", 48}} {
		target := fmt.Sprintf("%s RSS, %s (peak VmRSS)", want.process, map[string]string{"churn": "under churn", "1024 devices": "1,024 devices published"}[want.phase])
		wanted := fmt.Sprintf("< %.0f MiB", want.max)
		i := slices.IndexFunc(rs, func(r figures.RSS) bool { return r.Process == want.process && r.Phase == want.phase })
		if i < 0 {
			out = append(out, notMeasured("5", target, wanted))
			continue
		}
		m := mib(rs[i].RSSKiB)
		out = append(out, row{"5", target, wanted, fmt.Sprintf("%.1f MiB", m), m < want.max})
	}
	return out
}
