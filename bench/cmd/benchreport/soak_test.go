package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/netdra/netdra/bench/figures"
)

// TestRunSoak_RewritesOnlyItsSection: make soak's report replaces the
// soak section and keeps the rest (the scale section included); a second
// run replaces the first's; the plot is written; records without a run
// are refused.
func TestRunSoak_RewritesOnlyItsSection(t *testing.T) {
	in := t.TempDir()
	t.Setenv(figures.OutEnv, in)
	series := []figures.SoakSeries{{Name: "state.rss", Unit: "KiB", What: "state's VmRSS", Bound: 4096, Asserted: true},
		{Name: "links.host", Unit: "links", What: "links in the machine's netns", Bound: 20}}
	var samples []figures.SoakSample
	for i := range 20 {
		s := figures.SoakSample{T: float64(10 * i), Lifecycles: 7 * i, Values: map[string]float64{"state.rss": 20000 + float64(i%3), "links.host": 30}}
		samples = append(samples, s)
		if err := figures.Record(figures.SoakSampleFile, s); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	png := filepath.Join(t.TempDir(), "soak.png")
	if err := runSoak(in, out, png, time.Minute); err == nil {
		t.Fatal("runSoak without a run record: no error")
	}
	growth, err := figures.Growth(samples, series, 50, 35)
	if err != nil {
		t.Fatal(err)
	}
	if err := figures.Record(figures.SoakRunFile, figures.SoakRun{DurationS: 190, Lifecycles: 133, Workers: 4, Devices: 6,
		WarmupS: 50, WarmupLifecycles: 35, IntervalS: 10, Samples: 20, Growth: growth}); err != nil {
		t.Fatal(err)
	}
	before := "# results\n\nbefore\n\n" + scaleBegin + "\nscale\n" + scaleEnd + "\n"
	if err := os.WriteFile(out, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := runSoak(in, out, png, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	got, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(got), before) || strings.Count(string(got), soakBegin) != 1 ||
		!strings.Contains(string(got), "**133 lifecycles in 3m10s (98 after the warm-up)") ||
		!strings.Contains(string(got), "| state's VmRSS (KiB) |") || !strings.Contains(string(got), "reported (shared with other work)") {
		t.Fatalf("report:\n%s", got)
	}
	if fi, err := os.Stat(png); err != nil || fi.Size() == 0 {
		t.Errorf("the plot: %v", err)
	}
}
