package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/netdra/netdra/bench/figures"
)

// The plot's size (one panel is 6 x 4.25 in), its resolution and its
// colours: one per mode of the attach benchmark, and one for pods with
// and without a netdra claim.
const (
	panelW, panelH = 6 * vg.Inch, 4.25 * vg.Inch
	dpi            = 96
)

var (
	modeColors = []struct {
		name string
		c    color.RGBA
	}{
		{"baseline", color.RGBA{30, 90, 200, 255}},
		{"provisioner", color.RGBA{20, 150, 60, 255}},
		{"no-hook-exec", color.RGBA{230, 150, 20, 255}},
		{"pipeline", color.RGBA{210, 40, 40, 255}},
	}
	plainColor = color.RGBA{30, 90, 200, 255}
	claimColor = color.RGBA{210, 40, 40, 255}
	dashes     = []vg.Length{vg.Points(6), vg.Points(3)}
)

// writePlot draws the latency CDFs into a PNG, one panel a configuration:
// the first two rows are attach (solid) and detach (dashed) through the
// pipeline against the kernel's baseline, 1 and 8 devices a pod, 1, 16 and
// 64 concurrent pods; the third row is pod startup on the real node, with
// and without a netdra claim, one after the other, in a burst, and both.
func writePlot(path string, as []figures.Attach, ps []figures.PodStart) error {
	rows := [][]*plot.Plot{}
	for _, d := range []int{1, 8} {
		var row []*plot.Plot
		for _, pods := range []int{1, 16, 64} {
			p, err := attachPanel(as, d, pods)
			if err != nil {
				return err
			}
			row = append(row, p)
		}
		rows = append(rows, row)
	}
	var row []*plot.Plot
	for _, way := range []string{"serial", "burst", ""} {
		p, err := startupPanel(ps, way)
		if err != nil {
			return err
		}
		row = append(row, p)
	}
	rows = append(rows, row)
	return save(path, rows)
}

// save draws the panels on one canvas, aligned in a grid, and writes it.
func save(path string, rows [][]*plot.Plot) error {
	img := vgimg.NewWith(vgimg.UseWH(panelW*vg.Length(len(rows[0])), panelH*vg.Length(len(rows))), vgimg.UseDPI(dpi),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(rows), Cols: len(rows[0]), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(14), PadX: vg.Points(24), PadY: vg.Points(24)}
	canvases := plot.Align(rows, tiles, dc)
	for j := range rows {
		for i, p := range rows[j] {
			p.Draw(canvases[j][i])
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// newPanel is an empty CDF panel: title, axes, a grid, the p50 and p99
// lines, the legend at the bottom right (where a CDF leaves room).
func newPanel(title, xLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = xLabel
	p.Y.Label.Text = "fraction of samples"
	for _, a := range []*plot.Axis{&p.X, &p.Y} {
		a.Label.TextStyle.Font.Size = vg.Points(11)
		a.Tick.Label.Font.Size = vg.Points(10)
	}
	p.Y.Min, p.Y.Max = 0, 1
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"},
		{Value: 0.5, Label: "p50"}, {Value: 0.75, Label: "0.75"}, {Value: 0.9, Label: "p90"}, {Value: 0.99, Label: "p99"}})
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = color.Gray{Y: 225}, color.Gray{Y: 225}
	p.Add(g)
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.XOffs, p.Legend.YOffs = -vg.Points(6), vg.Points(6)
	p.Legend.ThumbnailWidth = vg.Points(24)
	return p
}

// attachPanel is the attach and detach CDFs of one configuration, each
// mode measured there, on a log scale padded to whole decades.
func attachPanel(as []figures.Attach, devices, pods int) (*plot.Plot, error) {
	p := newPanel(fmt.Sprintf("attach / detach, %s a pod, %s at once", plural(devices, "device"), plural(pods, "pod")),
		"latency (log scale): attach solid, detach dashed")
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, m := range modeColors {
		a, ok := find(as, m.name, devices, pods)
		if !ok {
			continue
		}
		for k, s := range []figures.Summary{a.Attach, a.Detach} {
			if len(s.Samples) == 0 {
				continue
			}
			l, err := cdfLine(s.Samples, 1, m.c, k == 1)
			if err != nil {
				return nil, err
			}
			p.Add(l)
			if k == 0 {
				p.Legend.Add(fmt.Sprintf("%s (p50 %.0f ms)", m.name, s.P50), l)
			}
			lo, hi = math.Min(lo, math.Max(s.Samples[0], 0.1)), math.Max(hi, s.Samples[len(s.Samples)-1])
		}
	}
	if math.IsInf(lo, 1) {
		return noData(p), nil
	}
	// Whole decades, and one more on the right: the legend's room.
	p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, msTicks{}
	p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi))+1)
	return p, nil
}

// startupPanel is pod startup on the real node, with a claim and without:
// way "serial" (one after the other), "burst", or "" (both, the burst
// dashed, on a log scale), in seconds.
func startupPanel(ps []figures.PodStart, way string) (*plot.Plot, error) {
	title := map[string]string{"serial": "real node: pods one after the other, create to Ready",
		"burst": "real node: pods created at once, create to Ready", "": "real node: both ways (one after the other solid, burst dashed)"}[way]
	p := newPanel(title, "seconds from the create request to Ready")
	n, lo, hi := 0, math.Inf(1), 0.0
	for _, x := range ps {
		if (way != "" && x.Way != way) || x.Way == "burst-raised" || len(x.Ready.Samples) == 0 {
			continue // the raised burst is the burst's control: in the text, not the plot
		}
		c, what := plainColor, "no claim"
		if x.Claim {
			c, what = claimColor, "netdra claim"
		}
		l, err := cdfLine(x.Ready.Samples, 1000, c, x.Way == "burst" && way == "")
		if err != nil {
			return nil, err
		}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s, %s of %d (p50 %.2f s)", what, x.Way, x.Pods, x.Ready.P50/1000), l)
		n, lo, hi = n+1, min(lo, math.Max(x.Ready.Samples[0]/1000, 0.01)), max(hi, x.Ready.Max/1000)
	}
	if n == 0 {
		return noData(p), nil
	}
	if way == "" {
		// Both ways: a log scale (a burst takes many times longer), whole
		// decades and one more on the right for the legend.
		p.X.Label.Text = "seconds from the create request to Ready (log scale)"
		p.X.Scale, p.X.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
		p.X.Min, p.X.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi))+1)
		return p, nil
	}
	// From 0, with room on the right for the legend.
	p.X.Min, p.X.Max = 0, hi*2.1
	p.X.Tick.Marker = linearTicks{}
	return p, nil
}

// linearTicks labels about eight round values (1, 2, 2.5 or 5 times a
// power of ten apart) with a minor tick between each.
type linearTicks struct{}

func (linearTicks) Ticks(lo, hi float64) []plot.Tick {
	span := hi - lo
	if span <= 0 {
		return nil
	}
	pow := math.Pow(10, math.Floor(math.Log10(span/8)))
	step := pow
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if span/(m*pow) <= 8 {
			step = m * pow
			break
		}
	}
	var ts []plot.Tick
	half := step / 2
	for i := math.Ceil(lo / half); i*half <= hi+half/1e6; i++ {
		label := ""
		if int(i)%2 == 0 {
			label = strconv.FormatFloat(math.Round(i*half/pow*100)*pow/100, 'f', -1, 64)
		}
		ts = append(ts, plot.Tick{Value: i * half, Label: label})
	}
	return ts
}

// msTicks are log ticks of a scale in milliseconds, labelled "1 ms" to
// "100 ms", then in seconds.
type msTicks struct{}

func (msTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.LogTicks{Prec: -1}.Ticks(lo, hi)
	for i, t := range ts {
		if t.Label == "" {
			continue
		}
		if t.Value < 1000 {
			ts[i].Label = strconv.FormatFloat(t.Value, 'f', -1, 64) + " ms"
		} else {
			ts[i].Label = strconv.FormatFloat(t.Value/1000, 'f', -1, 64) + " s"
		}
	}
	return ts
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// noData marks a panel of which nothing was measured in this run.
func noData(p *plot.Plot) *plot.Plot {
	p.Title.Text += " (not measured)"
	p.X.Min, p.X.Max = 1, 10
	p.HideX()
	return p
}

// cdfLine is the empirical CDF of sorted samples (divided by unit) as a
// step line.
func cdfLine(sorted []float64, unit float64, c color.Color, dashed bool) (*plotter.Line, error) {
	n := float64(len(sorted))
	xys := make(plotter.XYs, 0, len(sorted)+1)
	xys = append(xys, plotter.XY{X: math.Max(sorted[0], 0.1) / unit, Y: 0})
	for i, v := range sorted {
		xys = append(xys, plotter.XY{X: math.Max(v, 0.1) / unit, Y: float64(i+1) / n})
	}
	l, err := plotter.NewLine(xys)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PreStep
	l.Color, l.Width = c, vg.Points(1.8)
	if dashed {
		l.Dashes = dashes
	}
	return l, nil
}
