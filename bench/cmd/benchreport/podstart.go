package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/netdra/netdra/bench/figures"
)

// howStarted says how a pod startup phase started its pods.
func howStarted(x figures.PodStart) string {
	switch x.Way {
	case "serial":
		return "one after the other"
	case "burst-raised":
		return fmt.Sprintf("all at once, the control plane's client limits raised (%g qps)", x.ComponentQPS)
	}
	return "all at once"
}

// raisedQPS is the client rate of ps's "burst-raised" phases; zero when
// it has none.
func raisedQPS(ps []figures.PodStart) float64 {
	for _, x := range ps {
		if x.Way == "burst-raised" {
			return x.ComponentQPS
		}
	}
	return 0
}

// upperFirst is s with its first letter in upper case.
func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// writePodStart writes the section on pod startup on the real node with
// a netdra claim and without, and on the kubelet's restart.
func writePodStart(p func(string, ...any), ps []figures.PodStart, rs []figures.KubeletRestart) {
	if !section(p, "## Pod startup on the real node", len(ps) > 0 || len(rs) > 0) {
		return
	}
	p("BenchmarkWorld_PodStartup (shared/testinfra/testworld/benchworld): a real kubelet and containerd with NRI and runc")
	p("against the test world's control plane, netdra's four processes as installed (dra's netns hook on), the host")
	p("manager offering one veth a pod. Pods are created one after the other (each once the one before is Ready) and all")
	p("at once, with a claim for one device (a ResourceClaimTemplate: the claim made by the controller-manager, allocated")
	p("by the scheduler, prepared by the kubelet through dra, attached at RunPodSandbox by nri) and without one (the same")
	p("pod otherwise, netdra's NRI plugin required by the runtime's validator). Each pod is timed from its create request")
	p("to the first sight of its Ready condition in a watch. A phase's pods are deleted, and their claims gone, before")
	p("the next; one unmeasured pod of each kind runs first. netdra: the mean time of each of its calls in the phase,")
	if qps := raisedQPS(ps); qps > 0 {
		p("read from nri's and dra's metrics over the phase's start and teardown. The burst runs once more with the")
		p("controller-manager's and the scheduler's apiserver client limits raised (%g qps, as scheduler_perf runs them;", qps)
		p("the control plane restarted for it, then one unmeasured pod): what a claim adds to a burst once the claims made")
		p("from the template and the scheduler's writes no longer wait on those clients' rate limiters.")
	} else {
		p("read from nri's and dra's metrics over the phase's start and teardown.")
	}
	p("")
	p("| pods | how | claim | ready P50 s | P90 s | P99 s | max s | scheduled P50 s | P99 s | wall s | failures | netdra's calls, mean ms |")
	p("|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, x := range ps {
		how := howStarted(x)
		p("| %d | %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %d | %s |", x.Pods, how, yesNo(x.Claim), x.Ready.P50/1000,
			x.Ready.P90/1000, x.Ready.P99/1000, x.Ready.Max/1000, x.Scheduled.P50/1000, x.Scheduled.P99/1000, x.WallSeconds, x.Failures, hooks(x.Hooks))
	}
	p("")
	p("Scheduled: from the create request to the pod bound to the node (the scheduler's share, with a claim its wait")
	p("for the claim made from the template and its allocation), before the kubelet or netdra see the pod.")
	p("")
	writeStages(p, ps)
	for _, way := range []string{"serial", "burst", "burst-raised"} {
		plain, ok1 := findStart(ps, way, false)
		claim, ok2 := findStart(ps, way, true)
		if ok1 && ok2 {
			p("- %s: a claim adds %+.0f ms at P50, %+.0f ms at P90, %+.0f ms at P99. On the pod's path, netdra's own calls took,", upperFirst(howStarted(claim)),
				claim.Ready.P50-plain.Ready.P50, claim.Ready.P90-plain.Ready.P90, claim.Ready.P99-plain.Ready.P99)
			p("  on average, %s with a claim and %s without. Of the P50 difference, %+.0f ms is before the pod", onPath(claim.Hooks), onPath(plain.Hooks),
				claim.Scheduled.P50-plain.Scheduled.P50)
			p("  is bound to the node (the claim made from the template by the controller-manager, its allocation by the")
			p("  scheduler): outside netdra. On the node, every pod's hooks take the runtime's NRI lock in turn.")
		}
	}
	for _, r := range rs {
		slices := fmt.Sprintf("%.3f s", r.SlicesBackSeconds)
		if !r.SlicesDeleted {
			slices = "never deleted (the old slices stayed)"
		}
		p("- Kubelet restart, from the old kubelet's SIGTERM: the new one started and the Node seen Ready after %.2f s (the", r.RestartSeconds)
		p("  Node is still Ready in the API), the node's ResourceSlices back after %s, a pod with a claim created", slices)
		p("  then bound to the node after %.3f s and Running after %.3f s.", r.PodBoundSeconds, r.PodRunningSeconds)
		if r.PlainRunningSeconds > 0 {
			p("  A pod without a claim, created with it, Running after %.3f s: the restarted kubelet's own time, which", r.PlainRunningSeconds)
			p("  netdra has no part in (the kubelet watches its pods only once its Node informer has synced, which it checks")
			p("  once a second, then waits for the pod's volumes, polled every 300 ms); the claim adds %+.0f ms.",
				(r.PodRunningSeconds-r.PlainRunningSeconds)*1000)
		}
	}
	p("")
}

// stages are a pod start's stages in order, each a time from the create
// request.
var stages = []struct {
	name string
	of   func(figures.PodStart) figures.Summary
}{
	{"bound", func(x figures.PodStart) figures.Summary { return x.Scheduled }},
	{"sandbox begun", func(x figures.PodStart) figures.Summary { return x.Sandbox }},
	{"container made", func(x figures.PodStart) figures.Summary { return x.ContainerCreated }},
	{"container started", func(x figures.PodStart) figures.Summary { return x.ContainerStarted }},
	{"Ready", func(x figures.PodStart) figures.Summary { return x.Ready }},
}

// stepP50 is the P50 step to stage i of x from the stage before (from the
// create request for the first): the difference of the stages' P50s.
func stepP50(x figures.PodStart, i int) float64 {
	v := stages[i].of(x).P50
	if i > 0 {
		v -= stages[i-1].of(x).P50
	}
	return v
}

// writeStages splits each phase's start into its stages (P50 of each
// stage's time from the create request, and the step from the stage
// before), and for each way the claim's difference step by step: where
// on the pod's path the time a claim adds goes.
func writeStages(p func(string, ...any), ps []figures.PodStart) {
	if !slices.ContainsFunc(ps, func(x figures.PodStart) bool { return x.ContainerStarted.N > 0 }) {
		return
	}
	p("Where the time goes: each stage's P50 from the create request (in brackets the step from the stage before), by")
	p("the times containerd reports through the CRI for the runtime's stages: **bound** (the scheduler's), **sandbox")
	p("begun** (the kubelet saw the pod, prepared its claims through dra and asked for the sandbox), **container made**")
	p("(the sandbox up: its netns, the CNI's eth0, the NRI RunPodSandbox hooks; the kubelet's CreateContainer),")
	p("**container started** (runc's create with its OCI hook: for a claim netdra's check-netns, which waits on nri's")
	p("gate while the attach is still running; then its start) and **Ready** (seen in a watch: the kubelet reports it after its")
	p("next look at the runtime, its PLEG relisting every second).")
	p("")
	head, sep := "| pods | how | claim |", "|---|---|---|"
	for _, st := range stages {
		head += " " + st.name + " ms |"
		sep += "---|"
	}
	p("%s", head)
	p("%s", sep)
	for _, x := range ps {
		if x.ContainerStarted.N == 0 {
			continue
		}
		row := fmt.Sprintf("| %d | %s | %s |", x.Pods, x.Way, yesNo(x.Claim))
		for i, st := range stages {
			row += fmt.Sprintf(" %.0f (%+.0f) |", st.of(x).P50, stepP50(x, i))
		}
		p("%s", row)
	}
	p("")
	for _, way := range []string{"serial", "burst"} {
		plain, ok1 := findStart(ps, way, false)
		claim, ok2 := findStart(ps, way, true)
		if !ok1 || !ok2 || plain.ContainerStarted.N == 0 || claim.ContainerStarted.N == 0 {
			continue
		}
		var parts []string
		for i, st := range stages {
			parts = append(parts, fmt.Sprintf("%s %+.0f", st.name, stepP50(claim, i)-stepP50(plain, i)))
		}
		p("- %s, what a claim adds to each step's P50 (claim - no claim, ms): %s.", way, strings.Join(parts, ", "))
	}
	p("")
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// hooks lists the calls' mean times, sorted by name.
func hooks(h map[string]float64) string {
	var keys []string
	for k := range h {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %.1f", k, h[k]))
	}
	return strings.Join(out, ", ")
}

// onPath sums the mean times of netdra's calls that a pod's start waits
// for: dra's prepare, nri's RunPodSandbox and CreateContainer.
func onPath(h map[string]float64) string {
	var parts []string
	sum := 0.0
	for _, k := range []string{"dra prepare", "nri RunPodSandbox", "nri CreateContainer"} {
		if v, ok := h[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.1f", k, v))
			sum += v
		}
	}
	if len(parts) == 0 {
		return "nothing measured"
	}
	return fmt.Sprintf("%.1f ms (%s)", sum, strings.Join(parts, " + "))
}
