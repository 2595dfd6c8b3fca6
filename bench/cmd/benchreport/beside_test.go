package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/netdra/netdra/bench/figures"
)

// TestBesideTargets: the two rows, with the targets file's targets, of a pod without netdra devices beside
// 8-device pods, met only when both its Ready delays (P50, P99) and every
// hook's mean are within 2 ms and no pod failed; not measured without the
// alone or the beside-devices phase.
func TestBesideTargets(t *testing.T) {
	alone := figures.Beside{Phase: "alone", Plain: 20, Rounds: 3, Ready: figures.Summary{P50: 1800, P99: 2000}}
	dev := func(p50, p99, run float64, failures int) figures.Beside {
		return figures.Beside{Phase: "beside-devices", Plain: 20, Extra: 4, Devices: 8, Rounds: 3, Failures: failures,
			Ready: figures.Summary{P50: p50, P99: p99}, Hooks: map[string]float64{"nri RunPodSandbox": run, "nri CreateContainer": 0.5,
				"nri StopPodSandbox": 0.7}, HooksOver: map[string]float64{"nri RunPodSandbox": 0.25}}
	}
	plain := figures.Beside{Phase: "beside-plain", Plain: 20, Extra: 4, Rounds: 3, Ready: figures.Summary{P50: 1850, P99: 2010}}
	for _, tc := range []struct {
		name     string
		records  []figures.Beside
		measured []string
		met      []bool
	}{
		{"met", []figures.Beside{alone, dev(1801, 2002, 1.2, 0)}, []string{
			"P50 +1 ms, P99 +2 ms (1.80 / 2.00 s against 1.80 / 2.00 s; 20 pods beside 4 x 8 devices, 3 rounds)",
			"RunPodSandbox 1.2 ms (25% of calls over 2.5 ms), CreateContainer 0.5 ms (0% of calls over 2.5 ms), StopPodSandbox 0.7 ms (0% of calls over 2.5 ms)",
		}, []bool{true, true}},
		{"delayed, with the control", []figures.Beside{alone, plain, dev(2100, 2400, 3.1, 0)}, []string{
			"P50 +300 ms, P99 +400 ms (2.10 / 2.40 s against 1.80 / 2.00 s; 20 pods beside 4 x 8 devices, 3 rounds); beside as many pods without devices: P50 +50 ms, P99 +10 ms",
			"RunPodSandbox 3.1 ms (25% of calls over 2.5 ms), CreateContainer 0.5 ms (0% of calls over 2.5 ms), StopPodSandbox 0.7 ms (0% of calls over 2.5 ms)",
		}, []bool{false, false}},
		{"a pod failed", []figures.Beside{alone, dev(1800, 2000, 1, 1)}, []string{
			"P50 +0 ms, P99 +0 ms (1.80 / 2.00 s against 1.80 / 2.00 s; 20 pods beside 4 x 8 devices, 3 rounds)",
			"RunPodSandbox 1.0 ms (25% of calls over 2.5 ms), CreateContainer 0.5 ms (0% of calls over 2.5 ms), StopPodSandbox 0.7 ms (0% of calls over 2.5 ms)",
		}, []bool{false, true}},
		{"no alone phase", []figures.Beside{dev(1800, 2000, 1, 0)}, []string{"not measured in this run", "not measured in this run"}, []bool{false, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ts, err := readTargets(repoTargets)
			if err != nil {
				t.Fatal(err)
			}
			ts.Targets = slices.DeleteFunc(ts.Targets, func(x target) bool { return !strings.HasPrefix(x.Figure, "beside.") })
			var measured []string
			var met []bool
			rows, err := evaluate(ts.Targets, besideFigures(tc.records))
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rows {
				measured, met = append(measured, r.measured), append(met, r.met)
			}
			if diff := cmp.Diff(tc.measured, measured); diff != "" {
				t.Errorf("measured (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.met, met); diff != "" {
				t.Errorf("met (-want +got):\n%s", diff)
			}
		})
	}
}

// TestHookTargets_BesidePhase: the worst phase of nri's RunPodSandbox
// counts the beside benchmark's phases, whose pods have 8 devices.
func TestHookTargets_BesidePhase(t *testing.T) {
	ps := []figures.PodStart{{Way: "burst", Claim: true, Pods: 100, Hooks: map[string]float64{"nri RunPodSandbox": 1.5}}}
	bs := []figures.Beside{{Phase: "beside-devices", Plain: 20, Extra: 4, Devices: 8, Hooks: map[string]float64{"nri RunPodSandbox": 2.5}}}
	ts, err := readTargets(repoTargets)
	if err != nil {
		t.Fatal(err)
	}
	ts.Targets = slices.DeleteFunc(ts.Targets, func(x target) bool { return x.Figure != "nri.RunPodSandbox.mean" })
	rows, err := evaluate(ts.Targets, hookFigures(ps, bs))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 {
		t.Fatalf("%d rows for nri.RunPodSandbox.mean, want 1", len(rows))
	}
	got := rows[0]
	if want := "2.5 ms (20 pods without a claim beside 4 x 8 devices)"; got.measured != want || got.met {
		t.Errorf("RunPodSandbox's row: %q, met %v; want %q, not met", got.measured, got.met, want)
	}
}
