package figures

import (
	"errors"
	"math"
)

// Files the soak (make soak, the end-to-end test TestE2E_Soak) writes.
const (
	SoakSampleFile = "soak-samples.jsonl" // SoakSample records, in time order
	SoakRunFile    = "soak-run.jsonl"     // one SoakRun record at the end
)

// SoakSample is one sample of the soak: when it was taken (seconds since
// the first lifecycle began), how many pod lifecycles had ended by then,
// and the value of every series, by series name (SoakSeries).
type SoakSample struct {
	T          float64            `json:"t_s"`
	Lifecycles int                `json:"lifecycles"`
	Values     map[string]float64 `json:"values"`
}

// SoakSeries describes one sampled series: its name, its unit, what it
// counts, and the bound its growth is held under (Bound, in Unit per
// 1,000 lifecycles). Floor is the series' noise, in Unit: a fitted growth
// that adds up to less than Floor over the fitted lifecycles is not told
// from it, and holds whatever its rate (a short run's few lifecycles).
// Asserted is false for a series other tests on the same machine move
// too, which is reported but not held to its bound.
type SoakSeries struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	What     string  `json:"what"`
	Bound    float64 `json:"bound_per_1000"`
	Floor    float64 `json:"floor"`
	Asserted bool    `json:"asserted"`
}

// SoakGrowth is a series' fit over the samples after the warm-up: its
// slope per 1,000 lifecycles and that slope's standard error, the
// lifecycles the fit spans, its first and last value in the window, and
// whether it held (under its bound, or under its floor over the span).
type SoakGrowth struct {
	SoakSeries
	PerThousand float64 `json:"per_1000"`
	StdErr      float64 `json:"stderr_per_1000"`
	Span        int     `json:"span_lifecycles"`
	First       float64 `json:"first"`
	Last        float64 `json:"last"`
	Min         float64 `json:"min"`
	Max         float64 `json:"max"`
	Held        bool    `json:"held"`
}

// SoakRun is the soak's summary: its length, the pod lifecycles it ran,
// the warm-up the fit leaves out (the samples before WarmupS seconds or
// before WarmupLifecycles lifecycles), the sampling interval, what it found broken (devices lost,
// containers that ran without their device, other violations) and each
// series' growth.
type SoakRun struct {
	DurationS        float64      `json:"duration_s"`
	Lifecycles       int          `json:"lifecycles"`
	Workers          int          `json:"workers"`
	Devices          int          `json:"devices"`
	WarmupS          float64      `json:"warmup_s"`
	WarmupLifecycles int          `json:"warmup_lifecycles"`
	IntervalS        float64      `json:"interval_s"`
	Samples          int          `json:"samples"`
	DevicesLost      int          `json:"devices_lost"`
	WithoutDevice    int          `json:"containers_without_device"`
	Violations       int          `json:"violations"`
	Growth           []SoakGrowth `json:"growth"`
}

// Slope fits y = a + b*x by ordinary least squares and returns b and its
// standard error. It needs at least three points and two distinct x
// values; the error says which is missing.
func Slope(xs, ys []float64) (slope, stderr float64, err error) {
	n := len(xs)
	if n != len(ys) {
		return 0, 0, errors.New("slope: x and y differ in length")
	}
	if n < 3 {
		return 0, 0, errors.New("slope: fewer than three points")
	}
	var mx, my float64
	for i := range n {
		mx += xs[i]
		my += ys[i]
	}
	mx /= float64(n)
	my /= float64(n)
	var sxx, sxy float64
	for i := range n {
		sxx += (xs[i] - mx) * (xs[i] - mx)
		sxy += (xs[i] - mx) * (ys[i] - my)
	}
	if sxx == 0 {
		return 0, 0, errors.New("slope: every x is the same")
	}
	slope = sxy / sxx
	var rss float64
	for i := range n {
		r := ys[i] - (my + slope*(xs[i]-mx))
		rss += r * r
	}
	return slope, math.Sqrt(rss / float64(n-2) / sxx), nil
}

// Growth fits each series over the samples taken at or after warmup
// seconds and warmupLifecycles lifecycles (up to the last sample) against
// the lifecycles ended, in units per 1,000 lifecycles, and judges it
// against its bound and floor. A series without a value in a sample is
// fitted over the samples that have one.
func Growth(samples []SoakSample, series []SoakSeries, warmup float64, warmupLifecycles int) ([]SoakGrowth, error) {
	var out []SoakGrowth
	for _, s := range series {
		g := SoakGrowth{SoakSeries: s, Min: math.Inf(1), Max: math.Inf(-1)}
		var xs, ys []float64
		for _, smp := range samples {
			v, ok := smp.Values[s.Name]
			if smp.T < warmup || smp.Lifecycles < warmupLifecycles || !ok {
				continue
			}
			if len(ys) == 0 {
				g.First = v
			}
			g.Last = v
			g.Min, g.Max = min(g.Min, v), max(g.Max, v)
			xs = append(xs, float64(smp.Lifecycles))
			ys = append(ys, v)
		}
		b, se, err := Slope(xs, ys)
		if err != nil {
			return nil, errors.New("series " + s.Name + ": " + err.Error())
		}
		g.PerThousand, g.StdErr = b*1000, se*1000
		g.Span = int(xs[len(xs)-1] - xs[0])
		g.Held = g.PerThousand <= s.Bound || b*float64(g.Span) <= s.Floor
		out = append(out, g)
	}
	return out, nil
}
