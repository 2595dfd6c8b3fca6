package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/netdra/netdra/bench/figures"
)

// The phases of BenchmarkWorld_PodBesideDevicePods (figures.Beside.Phase).
const (
	besideAlone   = "alone"
	besidePlain   = "beside-plain"
	besideDevices = "beside-devices"
)

// besideHooks are the hooks of nri a pod's start and stop go through.
var besideHooks = []string{"RunPodSandbox", "CreateContainer", "StopPodSandbox"}

// findBeside returns the record of phase.
func findBeside(bs []figures.Beside, phase string) (figures.Beside, bool) {
	i := slices.IndexFunc(bs, func(x figures.Beside) bool { return x.Phase == phase })
	if i < 0 {
		return figures.Beside{}, false
	}
	return bs[i], true
}

// besideDelay is how much later the pods without a claim of phase x were
// Ready than alone, at P50 and P99 (ms).
func besideDelay(x, alone figures.Beside) (p50, p99 float64) {
	return x.Ready.P50 - alone.Ready.P50, x.Ready.P99 - alone.Ready.P99
}

// writeBeside writes the section on pods without netdra devices started
// alone, beside as many pods without devices, and beside pods with 8
// devices each, on the real node.
func writeBeside(p func(string, ...any), bs []figures.Beside) {
	if !section(p, "## A pod without netdra devices beside pods with 8 devices, on the real node", len(bs) > 0) {
		return
	}
	p("BenchmarkWorld_PodBesideDevicePods (shared/testinfra/testworld/benchworld), on the same real node as the pod startup:")
	p("pods without a claim (the pod startup's pod, netdra's NRI plugin required) are created at once **alone**, with as many")
	p("pods again without a claim created at the same moment (**beside-plain**: the same number of pods, no devices), and")
	p("with pods each with a claim of 8 host veths (8 requests, each its own pod interface name) created at the same moment")
	p("(**beside-devices**). Each pod is timed from its create request to Ready; the ready columns are the pods without a")
	p("claim's. A phase's pods are deleted, their sandboxes stopped and every veth back in the host netns before the next;")
	p("the phases run in turn for the rounds (their order rotated), each phase's samples pooled. netdra: the mean time of")
	p("each call over the phase's starts and teardowns (nri's and dra's metrics: the calls of all the phase's pods, with")
	p("and without a claim), and the share of each nri hook's calls over %g ms (the histogram's bucket nearest the hooks'", figures.HookSlowSeconds*1000)
	p("target).")
	p("")
	p("| phase | pods without a claim | beside them | rounds | P50 of each round, s | ready P50 s | P90 s | P99 s | max s | beside: bound P50 s | beside: ready P50 s | wall s | failures | netdra's calls, mean ms | nri hook calls over %g ms |", figures.HookSlowSeconds*1000)
	p("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range bs {
		beside, bound, ready := "nothing", "-", "-"
		if x.Extra > 0 {
			bound, ready = fmt.Sprintf("%.3f", x.ExtraScheduled.P50/1000), fmt.Sprintf("%.3f", x.ExtraReady.P50/1000)
			beside = fmt.Sprintf("%d pods without a claim", x.Extra)
			if x.Devices > 0 {
				beside = fmt.Sprintf("%d pods x %d devices", x.Extra, x.Devices)
			}
		}
		p("| %s | %d | %s | %d | %s | %.3f | %.3f | %.3f | %.3f | %s | %s | %.1f | %d | %s | %s |", x.Phase, x.Plain, beside, x.Rounds,
			seconds(x.RoundP50), x.Ready.P50/1000, x.Ready.P90/1000, x.Ready.P99/1000, x.Ready.Max/1000, bound, ready, x.WallSeconds, x.Failures, hooks(x.Hooks), overShares(x.HooksOver))
	}
	p("")
	alone, ok := findBeside(bs, besideAlone)
	for _, name := range []string{besidePlain, besideDevices} {
		if x, ok2 := findBeside(bs, name); ok && ok2 {
			d50, d99 := besideDelay(x, alone)
			p("- %s against alone: the pods without a claim Ready %+.0f ms at P50, %+.0f ms at P99.", name, d50, d99)
		}
	}
	plain, ok1 := findBeside(bs, besidePlain)
	dev, ok2 := findBeside(bs, besideDevices)
	if ok1 && ok2 {
		d50, d99 := besideDelay(dev, plain)
		p("- beside-devices against beside-plain (as many pods, the extra ones without devices): %+.0f ms at P50, %+.0f ms at P99,", d50, d99)
		p("  what the claims and their devices' moves add beyond the extra pods themselves.")
	}
	if ok && len(alone.RoundP50) > 1 {
		lo, hi := slices.Min(alone.RoundP50), slices.Max(alone.RoundP50)
		p("- The P50 of alone's rounds spread over %.0f ms (%.2f to %.2f s): a difference between the phases smaller than", hi-lo, lo/1000, hi/1000)
		p("  that is within this run's noise, and the hooks' target is resolved only as far as that spread allows.")
	}
	for _, x := range bs {
		if x.Context != "" {
			p("- %s: %s.", x.Phase, x.Context)
		}
	}
	p("")
}

// seconds lists ms values as seconds.
func seconds(ms []float64) string {
	var out []string
	for _, v := range ms {
		out = append(out, fmt.Sprintf("%.2f", v/1000))
	}
	return strings.Join(out, ", ")
}

// overShares lists the nri hooks' shares of calls over
// figures.HookSlowSeconds, as percentages.
func overShares(over map[string]float64) string {
	var out []string
	for _, h := range besideHooks {
		if v, ok := over["nri "+h]; ok {
			out = append(out, fmt.Sprintf("%s %.0f%%", h, v*100))
		}
	}
	return strings.Join(out, ", ")
}

// besideFigures: a pod without netdra devices beside pods with 8 devices
// each, delayed by netdra.
//
// beside.kubelet.delay, from the kubelet's side: the pods without a
// claim's Ready, beside-devices against alone, the larger of the P50 and
// P99 delays (p50, p99: ms), from their P50s and P99s (besideP50,
// besideP99, aloneP50, aloneP99: s), of pods beside extra pods of devices
// each, over rounds; with beside-plain measured (control), its delays
// (controlP50, controlP99: ms); with more than one round (spread), how
// far alone's rounds' P50s spread (spreadMs).
//
// beside.hooks.mean, inside netdra's hooks: their largest mean in
// beside-devices (ms); hooks lists each (name, mean: ms, overPercent: the
// share of its calls figures.Beside.HooksOver counts as slow, slowMs:
// figures.HookSlowSeconds in ms).
func besideFigures(bs []figures.Beside) map[string]figure {
	alone, ok1 := findBeside(bs, besideAlone)
	dev, ok2 := findBeside(bs, besideDevices)
	if !ok1 || !ok2 {
		return nil
	}
	d50, d99 := besideDelay(dev, alone)
	vars := map[string]any{"p50": d50, "p99": d99, "besideP50": dev.Ready.P50 / 1000, "besideP99": dev.Ready.P99 / 1000,
		"aloneP50": alone.Ready.P50 / 1000, "aloneP99": alone.Ready.P99 / 1000, "pods": dev.Plain, "extra": dev.Extra,
		"devices": dev.Devices, "rounds": dev.Rounds, "control": false, "spread": len(alone.RoundP50) > 1}
	if plain, ok := findBeside(bs, besidePlain); ok {
		vars["control"] = true
		vars["controlP50"], vars["controlP99"] = besideDelay(plain, alone)
	}
	if len(alone.RoundP50) > 1 {
		vars["spreadMs"] = slices.Max(alone.RoundP50) - slices.Min(alone.RoundP50)
	}
	out := map[string]figure{"beside.kubelet.delay": {value: max(d50, d99), failed: dev.Failures > 0 || alone.Failures > 0, vars: vars}}
	var hooks []map[string]any
	worst := 0.0
	for _, h := range besideHooks {
		v, ok := dev.Hooks["nri "+h]
		if !ok {
			return out
		}
		hooks = append(hooks, map[string]any{"name": h, "mean": v, "overPercent": dev.HooksOver["nri "+h] * 100, "slowMs": figures.HookSlowSeconds * 1000})
		worst = max(worst, v)
	}
	out["beside.hooks.mean"] = figure{value: worst, vars: map[string]any{"hooks": hooks}}
	return out
}

// besideName names a phase of the beside benchmark for the targets.
func besideName(x figures.Beside) string {
	switch {
	case x.Extra == 0:
		return fmt.Sprintf("%d pods without a claim, alone", x.Plain)
	case x.Devices == 0:
		return fmt.Sprintf("%d pods without a claim beside %d without", x.Plain, x.Extra)
	}
	return fmt.Sprintf("%d pods without a claim beside %d x %d devices", x.Plain, x.Extra, x.Devices)
}
