package main

import (
	"fmt"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"gonum.org/v1/plot/vg"

	"github.com/netdra/netdra/bench/figures"
)

// samples returns n latencies around ms, summarized.
func samples(r *rand.Rand, n int, ms float64) figures.Summary {
	d := make([]time.Duration, n)
	for i := range d {
		d[i] = time.Duration((ms * (0.8 + 0.4*r.Float64())) * float64(time.Millisecond))
	}
	return figures.Summarize(d)
}

// writeRecords writes a run's records: attach of every mode and
// configuration, pod startup of the four phases, the beside benchmark's
// three phases, a kubelet restart and the processes' RSS.
func writeRecords(t *testing.T, dir string) {
	t.Helper()
	t.Setenv(figures.OutEnv, dir)
	r := rand.New(rand.NewPCG(1, 2))
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []int{1, 8} {
		for _, c := range []int{1, 16, 64} {
			for mode, f := range map[string]float64{"baseline": 1, "provisioner": 2, "no-hook-exec": 2.5, "pipeline": 3} {
				a := figures.Attach{Mode: mode, Devices: d, Concurrency: c, Pods: 40, Attach: samples(r, 40, f*17*float64(d*c)),
					Detach: samples(r, 40, f*20*float64(d*c)), MovesPerSec: 50 / f}
				must(figures.Record(figures.AttachFile, a))
			}
		}
	}
	for _, way := range []string{"serial", "burst"} {
		for _, claim := range []bool{false, true} {
			ms := map[string]float64{"serial": 500, "burst": 2000}[way]
			if claim {
				ms *= 1.2
			}
			must(figures.Record(figures.PodStartFile, figures.PodStart{Way: way, Claim: claim, Pods: 100, Ready: samples(r, 100, ms),
				Scheduled: samples(r, 100, ms/20), Sandbox: samples(r, 100, ms/10), ContainerCreated: samples(r, 100, ms/2),
				ContainerStarted: samples(r, 100, ms*0.7), Hooks: map[string]float64{"nri RunPodSandbox": 1.5, "nri StopPodSandbox": 3, "dra prepare": 30}}))
		}
	}
	for phase, ms := range map[string]float64{"alone": 1800, "beside-plain": 1900, "beside-devices": 2100} {
		x := figures.Beside{Phase: phase, Plain: 20, Rounds: 3, Ready: samples(r, 60, ms),
			Hooks: map[string]float64{"nri RunPodSandbox": 0.4, "nri CreateContainer": 0.6, "nri StopPodSandbox": 0.5}}
		if phase != "alone" {
			x.Extra = 4
		}
		if phase == "beside-devices" {
			x.Devices, x.Hooks["nri RunPodSandbox"] = 8, 1.2
		}
		must(figures.Record(figures.BesideFile, x))
	}
	must(figures.Record(figures.RestartFile, figures.KubeletRestart{RestartSeconds: 1.2, SlicesBackSeconds: 0.3, PodBoundSeconds: 0.4, PodRunningSeconds: 1.1, PlainRunningSeconds: 1.0, SlicesDeleted: true}))
	must(figures.Record(figures.InventoryFile, figures.Inventory{Devices: 1024, Seconds: 2.29, RoundsMs: []float64{2910, 2290, 1720}, Slices: 16}))
	for name, kib := range map[string]int{"state": 20 << 10, "provisioner": 35 << 10, "nri": 25 << 10} {
		must(figures.Record(figures.RSSFile, figures.RSS{Process: name, Phase: "churn", RSSKiB: kib}))
	}
}

// TestRun_ReportAndPlot: the report lists each target with
// the figure and its verdict from the records, and the plot is a PNG of
// the grid of panels with the modes' and the claims' colours drawn in it.
func TestRun_ReportAndPlot(t *testing.T) {
	dir := t.TempDir()
	writeRecords(t, dir)
	out, plot := filepath.Join(dir, "RESULTS.md"), filepath.Join(dir, "latency.png")
	if err := run(dir, out, plot, repoTargets, time.Minute); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"| pod startup | pod startup one after the other, P50 with a claim - without | <= 20 ms | +",
		"ms the control plane's and ",
		"| pod startup | kubelet restart: from its SIGTERM, slices back and a new pod with a claim Running | < 2 s | slices 0.30 s, pod Running 1.10 s (a pod without a claim beside it: 1.00 s, the kubelet's own) | met |",
		"| hooks | nri RunPodSandbox on the real node, mean per pod (worst phase, nri's metrics) | <= 2 ms | 1.5 ms",
		"| hooks | nri StopPodSandbox on the real node, mean per pod (worst phase, nri's metrics) | <= 2 ms | 3.0 ms",
		"| hooks | a pod without netdra devices beside 8-device pods, delayed by netdra: from the kubelet's side (Ready P50 and P99, beside - alone) | <= 2 ms | P50 +",
		"| hooks | a pod without netdra devices beside 8-device pods, delayed by netdra: inside its hooks (nri's mean per call, beside 8-device pods) | <= 2 ms | RunPodSandbox 1.2 ms",
		"| beside-devices | 20 | 4 pods x 8 devices | 3 |",
		"| memory | state RSS, under churn (peak VmRSS) | < 30 MiB | 20.0 MiB | met |",
		"| memory | provisioner RSS, under churn (peak VmRSS) | < 30 MiB | 35.0 MiB | **not met** |",
		"| publication | 1024 devices published | < 1 s | 2.29 s (median of 3 rounds: 2.91, 2.29, 1.72) | **not met** |",
		"- **publication, 1024 devices published**: the apiserver's writes of the slices",
		"- **attach latency, attach p50 pipeline/baseline, 1 pod, 1 device(s)**: of the ",
		"\nWhere the time goes (one run of the 1-pod, 1-device configuration",
		"| memory | dra RSS, 1,024 devices published (peak VmRSS) | < 48 MiB | not measured in this run | not measured |",
		"| moves | moves/s pipeline/baseline, 64 pods x 1 device(s) | >= 0.95x | 0.33x",
		"| attach latency | attach p50 pipeline/baseline, 1 pod, 8 device(s) | <= 1.05x |",
		"![attach latency CDFs, pipeline against baseline](latency.png)",
		"| pods | how | claim | bound ms | sandbox begun ms | container made ms | container started ms | Ready ms |",
		"- serial, what a claim adds to each step's P50 (claim - no claim, ms): bound +",
		"then bound to the node after 0.400 s and Running after 1.100 s.",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report has no %q", want)
		}
	}
	checkPlot(t, plot)
}

func checkPlot(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	pw, ph := int(panelW/vg.Inch*dpi), int(panelH/vg.Inch*dpi)
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w != 3*pw || h != 3*ph {
		t.Errorf("plot is %dx%d, want 3 x 3 panels of %dx%d", w, h, pw, ph)
	}
	seen := map[color.RGBA]int{}
	for y := img.Bounds().Min.Y; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			seen[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}]++
		}
	}
	for _, m := range modeColors {
		if seen[m.c] < 100 {
			t.Errorf("mode %s: %d pixels of its colour in the plot", m.name, seen[m.c])
		}
	}
	// The bottom row (pod startup) alone: its claim and no-claim lines.
	bottom := map[color.RGBA]int{}
	for y := img.Bounds().Max.Y * 2 / 3; y < img.Bounds().Max.Y; y++ {
		for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
			r, g, b, _ := img.At(x, y).RGBA()
			bottom[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 255}]++
		}
	}
	if bottom[plainColor] < 100 || bottom[claimColor] < 100 {
		t.Errorf("the pod startup row has %d pixels without a claim's colour and %d with", bottom[plainColor], bottom[claimColor])
	}
}

// repoTargets is the repository's targets file, the one make bench uses.
const repoTargets = "../../targets.yaml"

// TestReadTargets: the repository's targets file is taken; a target with
// a field wrong is refused naming it.
func TestReadTargets(t *testing.T) {
	ts, err := readTargets(repoTargets)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts.Targets) == 0 || ts.GroupNotes["attach latency"] == "" || ts.Causes == "" || len(ts.ScaleGoals) == 0 {
		t.Errorf("the targets file has %d targets, notes %v and causes %q", len(ts.Targets), ts.GroupNotes, ts.Causes)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown figure", `targets: [{group: g, name: n, figure: attach.p42.ratio.1dev, compare: "<=", value: 1, unit: x}]`, "targets[0].figure"},
		{"bad compare", `targets: [{group: g, name: n, figure: kubelet.restart, compare: "=<", value: 1, unit: s}]`, "targets[0].compare"},
		{"bad unit", `targets: [{group: g, name: n, figure: kubelet.restart, compare: "<", value: 1, unit: min}]`, "targets[0].unit"},
		{"no name", `targets: [{group: g, figure: kubelet.restart, compare: "<", value: 1, unit: s}]`, "targets[0].name"},
		{"unknown field", `targets: [{group: g, name: n, figure: kubelet.restart, compare: "<", value: 1, unit: s, wanted: 3}]`, "wanted"},
		{"no measured", `targets: [{group: g, name: n, figure: kubelet.restart, compare: "<", value: 1, unit: s}]`, "targets[0].measured"},
		{"bad scale figure", `scaleGoals: [{name: n, figure: nope, compare: "<", value: 1, wanted: w, measured: m}]`, "scaleGoals[0].figure"},
		{"bad template", `targets: [{group: g, name: n, figure: kubelet.restart, compare: "<", value: 1, unit: s, measured: x, why: "{{if .a}}"}]`, "targets[0].why"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "targets.yaml")
			if err := os.WriteFile(path, []byte(tc.body), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := readTargets(path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readTargets = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestEvaluate: a target's verdict follows its comparison, a figure of a
// failed run meets nothing, and a figure not measured is not met; its
// sentences are executed over the figure's values, and one naming a value
// the figure does not have is an error naming the target.
func TestEvaluate(t *testing.T) {
	ts := []target{
		{Group: "g", Name: "at most", Figure: "a", Compare: "<=", Value: 2, Unit: "ms", Measured: "{{.value}} ms", Why: "{{.cause}}; the code's cause"},
		{Group: "g", Name: "at least", Figure: "b", Compare: ">=", Value: 0.95, Unit: "x", Measured: `{{printf "%.2fx" .value}}`},
		{Group: "g", Name: "failed run", Figure: "c", Compare: "<", Value: 30, Unit: "MiB", Measured: `{{printf "%.1f MiB" .value}}`},
		{Group: "g", Name: "absent", Figure: "d", Compare: "<", Value: 1, Unit: "s", Measured: "{{.nothing}}"},
	}
	figs := map[string]figure{"a": {value: 2.5, vars: map[string]any{"cause": "this run's cause"}}, "b": {value: 0.95},
		"c": {value: 10, failed: true}}
	rows, err := evaluate(ts, figs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, fmt.Sprintf("%s | %s | %s | %v | %s", r.Name, r.wanted(), r.measured, r.met, r.why))
	}
	want := []string{
		"at most | <= 2 ms | 2.5 ms | false | this run's cause; the code's cause",
		"at least | >= 0.95x | 0.95x | true | ",
		"failed run | < 30 MiB | 10.0 MiB | false | ",
		"absent | < 1 s | not measured in this run | false | ",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rows (-want +got):\n%s", diff)
	}
	ts[1].Why = "{{.cause}}"
	if _, err := evaluate(ts, figs); err == nil || !strings.Contains(err.Error(), "targets[1].why") {
		t.Errorf("evaluate with a value the figure does not have = %v, want an error naming targets[1].why", err)
	}
}

// TestMemoryFigures_Totals: each process's peak of a phase, named with
// the phase's spaces and commas as dashes, and the processes' peaks of a
// phase added up, each named, with their RssAnon and RssFile where every
// record read them.
func TestMemoryFigures_Totals(t *testing.T) {
	figs := memoryFigures([]figures.RSS{
		{Process: "state", Phase: "idle, 64 devices", RSSKiB: 10 * 1024, AnonKiB: 4 * 1024, FileKiB: 6 * 1024},
		{Process: "dra", Phase: "idle, 64 devices", RSSKiB: 30 * 1024},
		{Process: "dra", Phase: "idle, 64 devices", RSSKiB: 32 * 1024, AnonKiB: 8 * 1024, FileKiB: 24 * 1024},
		{Process: "dra", Phase: "churn", RSSKiB: 40 * 1024},
	})
	got := map[string]string{}
	for k, f := range figs {
		got[k] = fmt.Sprintf("%.1f %v anon %v file %v known %v", f.value, f.vars["each"], f.vars["anon"], f.vars["file"], f.vars["known"])
	}
	want := map[string]string{
		"rss.state.idle-64-devices": "10.0 <nil> anon 4 file 6 known true",
		"rss.dra.idle-64-devices":   "32.0 <nil> anon 8 file 24 known true",
		"rss.dra.churn":             "40.0 <nil> anon 0 file 0 known false",
		"rss.total.idle-64-devices": "42.0 state 10.0, dra 32.0 anon 12 file 30 known true",
		"rss.total.churn":           "40.0 dra 40.0 anon 0 file 0 known false",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("figures (-want +got):\n%s", diff)
	}
}

// TestStartupAndPrepareFigures: the serial P50 ratio of pods with a claim
// to pods without, and a back-to-back prepare's P50 by devices (a paced
// run is not one).
func TestStartupAndPrepareFigures(t *testing.T) {
	st := startupFigures([]figures.PodStart{
		{Way: "serial", Claim: false, Pods: 20, Ready: figures.Summary{P50: 800}},
		{Way: "serial", Claim: true, Pods: 20, Ready: figures.Summary{P50: 840}},
	}, nil)
	if f := st["podstart.serial.p50.ratio"]; f.value != 1.05 || f.vars["claim"] != 0.84 || f.vars["plain"] != 0.8 {
		t.Errorf("podstart.serial.p50.ratio = %v %v, want 1.05 from 0.84 and 0.8 s", f.value, f.vars)
	}
	pf := prepareFigures([]figures.Prepare{
		{Devices: 1, Prepare: figures.Summary{N: 20, P50: 12.5, P99: 40}},
		{Devices: 1, Paced: true, Prepare: figures.Summary{N: 8, P50: 30}},
		{Devices: 8, Prepare: figures.Summary{N: 20, P50: 60}},
	})
	if f := pf["prepare.p50.1dev"]; f.value != 12.5 || f.vars["p99"] != 40.0 || f.vars["claims"] != 20 {
		t.Errorf("prepare.p50.1dev = %v %v, want 12.5 ms, P99 40 of 20 claims", f.value, f.vars)
	}
	if f := pf["prepare.p50.8dev"]; f.value != 60 {
		t.Errorf("prepare.p50.8dev = %v, want 60", f.value)
	}
}
