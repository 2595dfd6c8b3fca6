package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/bench/figures"
)

// TestRunScale_RewritesOnlyItsSection: make bench-scale's report replaces
// the scale section and nothing else; a report without one gets it at its
// end; make bench's full report carries it over.
func TestRunScale_RewritesOnlyItsSection(t *testing.T) {
	in := t.TempDir()
	t.Setenv(figures.OutEnv, in)
	for _, n := range []int{100, 500} {
		r := figures.Scale{Nodes: n, RestWindowS: 120, StartupS: 3, ChangeAppliedMaxS: 4, ChangeSlicesMaxS: 5,
			WritesPerNodeHour: map[string]float64{"leases PUT": 1.5}, SchedPodsPerSec: map[string]float64{"no claim": 300, "1 VF claim": 250},
			Watches: map[string]float64{"resourceslices": float64(n + 1)}, BaselineWatches: map[string]float64{"resourceslices": 1},
			CPRSSMiB: 500, EtcdBytes: 1 << 22}
		if err := figures.Record(figures.ScaleFile, r); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(t.TempDir(), "RESULTS.md")
	png := filepath.Join(t.TempDir(), "scale.png")
	if err := os.WriteFile(out, []byte("# results\n\nbefore\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runScale(in, out, png, repoTargets, time.Minute); err != nil {
		t.Fatal(err)
	}
	first, _ := os.ReadFile(out)
	if !strings.HasPrefix(string(first), "# results\n\nbefore\n") || !strings.Contains(string(first), "| N = 100 | N = 500 |") ||
		!strings.Contains(string(first), "resourceslices 1.00") {
		t.Fatalf("report after the first scale run:\n%s", first)
	}
	// A second run replaces the section, keeping the rest.
	if err := os.WriteFile(out, []byte(strings.Replace(string(first), "before", "before, edited", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := runScale(in, out, png, repoTargets, time.Minute); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(out)
	if strings.Count(string(second), scaleBegin) != 1 || !strings.Contains(string(second), "before, edited") {
		t.Fatalf("report after the second scale run:\n%s", second)
	}
	if got := spliceScale("# full report\n", scaleSection(string(second))); scaleSection(got) != scaleSection(string(second)) {
		t.Fatalf("the full report does not carry the scale section over:\n%s", got)
	}
}

// TestScaleGoals_NotAtTheirN: without a run at 1,000 nodes the largest
// run's change row says so, and a run at 500 without the raised limits
// has no row for them.
func TestScaleGoals_NotAtTheirN(t *testing.T) {
	ts, err := readTargets(repoTargets)
	if err != nil {
		t.Fatal(err)
	}
	runs := []figures.Scale{{Nodes: 100, RestWindowS: 60}, {Nodes: 500, RestWindowS: 60, ChangeAppliedMaxS: 20, ChangeSlicesMaxS: 30,
		SchedPodsPerSec: map[string]float64{"1 VF claim": 250, "no claim": 300}}}
	var b strings.Builder
	if err := writeScaleGoals(func(f string, a ...any) { fmt.Fprintf(&b, f+"\n", a...) }, runs, ts.ScaleGoals); err != nil {
		t.Fatal(err)
	}
	want := `| goal | wanted | measured | |
|---|---|---|---|
| netdra's writes at rest, N = 100 | none | 0.0 per node per hour | met |
| netdra's writes at rest, N = 500 | none | 0.0 per node per hour | met |
| ClusterConfig change to every node applied and republished, N = 500 | < 60 s at 1,000 | 30.0 s (0 nodes missing) | **not measured at 1,000** |
| pods with a netdra claim scheduled, N = 500 | >= 244 pods/s | 250 pods/s (without a claim 300) | met |

`
	if diff := cmp.Diff(want, b.String()); diff != "" {
		t.Errorf("goals (-want +got):\n%s", diff)
	}
}
