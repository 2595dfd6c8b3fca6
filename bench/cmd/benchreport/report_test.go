package main

import (
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if err := run(dir, out, plot, time.Minute); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	report := string(b)
	for _, want := range []string{
		"| 4 | pod startup one after the other, P50 with a claim - without | <= +20 ms | +",
		"ms the control plane's and ",
		"| 4 | kubelet restart: from its SIGTERM, slices back and a new pod with a claim Running | < 2 s | slices 0.30 s, pod Running 1.10 s (a pod without a claim beside it: 1.00 s, the kubelet's own) | met |",
		"| 3 | nri RunPodSandbox on the real node, mean per pod (worst phase, nri's metrics) | <= 2 ms | 1.5 ms",
		"| 3 | nri StopPodSandbox on the real node, mean per pod (worst phase, nri's metrics) | <= 2 ms | 3.0 ms",
		"| 3 | a pod without netdra devices beside 8-device pods, delayed by netdra: from the kubelet's side (Ready P50 and P99, beside - alone) | <= 2 ms | P50 +",
		"| 3 | a pod without netdra devices beside 8-device pods, delayed by netdra: inside its hooks (nri's mean per call, beside 8-device pods) | <= 2 ms | RunPodSandbox 1.2 ms",
		"| beside-devices | 20 | 4 pods x 8 devices | 3 |",
		"| 5 | state RSS, under churn (peak VmRSS) | < 30 MiB | 20.0 MiB | met |",
		"| 5 | provisioner RSS, under churn (peak VmRSS) | < 30 MiB | 35.0 MiB | **not met** |",
		"| 5 | dra RSS, 1,024 devices published (peak VmRSS) | < 48 MiB | not measured in this run | not measured |",
		"| 2 | moves/s pipeline/baseline, 64 pods x 1 device(s) | >= 0.95x | 0.33x",
		"| 1 | attach p50 pipeline/baseline, 1 pod, 8 device(s) | <= 1.05x |",
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
