package figures

import (
	"math"
	"testing"
)

// Slope recovers a known line exactly, and a noisy one within its
// standard error; Growth fits only the samples after the warm-up.
func TestSlope(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4}
	b, se, err := Slope(xs, []float64{3, 5, 7, 9, 11})
	if err != nil || b != 2 || se != 0 {
		t.Errorf("Slope of y = 3 + 2x: %v ± %v, %v", b, se, err)
	}
	b, se, err = Slope(xs, []float64{1, 2, 1, 2, 1})
	if err != nil || math.Abs(b) > 2*se || se == 0 {
		t.Errorf("Slope of a flat noisy series: %v ± %v, %v", b, se, err)
	}
	if _, _, err := Slope([]float64{1, 1, 1}, []float64{1, 2, 3}); err == nil {
		t.Error("Slope with one x: no error")
	}
	if _, _, err := Slope([]float64{1, 2}, []float64{1, 2}); err == nil {
		t.Error("Slope of two points: no error")
	}
}

func TestGrowth(t *testing.T) {
	var samples []SoakSample
	for i := range 10 {
		v := 100.0 // flat after the warm-up
		if i < 3 {
			v = float64(10 * i) // the warm-up climbs
		}
		samples = append(samples, SoakSample{T: float64(i), Lifecycles: 100 * i, Values: map[string]float64{"a": v, "b": float64(i)}})
	}
	g, err := Growth(samples, []SoakSeries{{Name: "a", Bound: 1}, {Name: "b", Bound: 5}}, 3, 0)
	if err != nil {
		t.Fatal(err)
	}
	if g[0].PerThousand != 0 || !g[0].Held || g[0].First != 100 {
		t.Errorf("a: %+v", g[0])
	}
	if math.Abs(g[1].PerThousand-10) > 1e-9 || g[1].Held {
		t.Errorf("b grows 10 per 1,000 over a bound of 5: %+v", g[1])
	}
	// Over its 600 lifecycles, b grows 6: under a floor of 6 it holds.
	g, err = Growth(samples, []SoakSeries{{Name: "b", Bound: 5, Floor: 6}}, 3, 0)
	if err != nil || g[0].Span != 600 || !g[0].Held {
		t.Errorf("b under its floor: %+v, %v", g, err)
	}
	// The lifecycles' warm-up: from 500 on, b's 5 samples span 400.
	g, err = Growth(samples, []SoakSeries{{Name: "b", Bound: 5}}, 0, 500)
	if err != nil || g[0].Span != 400 || g[0].First != 5 {
		t.Errorf("b after 500 lifecycles: %+v, %v", g, err)
	}
	if _, err := Growth(samples, []SoakSeries{{Name: "missing"}}, 0, 0); err == nil {
		t.Error("a series without samples: no error")
	}
}
