package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"

	"github.com/netdra/netdra/bench/figures"
)

var (
	white = color.RGBA{255, 255, 255, 255}
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{200, 200, 200, 255}
	modes = []struct {
		name string
		c    color.RGBA
	}{
		{"baseline", color.RGBA{30, 90, 200, 255}},
		{"provisioner", color.RGBA{20, 150, 60, 255}},
		{"pipeline", color.RGBA{210, 40, 40, 255}},
	}
)

const (
	panelW, panelH = 440, 300
	marginL        = 60
	marginB        = 40
	top            = 70
	xMinLog        = 0.0 // 1 ms
	xMaxLog        = 5.0 // 100 s
)

// writePlot draws the attach latency CDFs: rows are devices per pod (1, 8),
// columns concurrent pods (1, 16, 64).
func writePlot(path string, as []figures.Attach) error {
	rows, cols := []int{1, 8}, []int{1, 16, 64}
	w, h := marginL+len(cols)*(panelW+marginL), top+len(rows)*(panelH+marginB+30)
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	fill(img, img.Bounds(), white)
	drawText(img, marginL, 12, 3, "ATTACH LATENCY CDF, MS (LOG)", black)
	x := marginL + textWidth("ATTACH LATENCY CDF, MS (LOG)", 3) + 40
	for _, m := range modes {
		fill(img, image.Rect(x, 20, x+30, 26), m.c)
		drawText(img, x+36, 16, 2, m.name, m.c)
		x += 36 + textWidth(m.name, 2) + 30
	}
	for ri, d := range rows {
		for ci, pods := range cols {
			x0 := marginL + ci*(panelW+marginL)
			y0 := top + ri*(panelH+marginB+30) + 20
			drawText(img, x0, y0-18, 2, fmt.Sprintf("DEVICES=%d PODS=%d", d, pods), black)
			panel(img, image.Rect(x0, y0, x0+panelW, y0+panelH), as, d, pods)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func panel(img *image.RGBA, r image.Rectangle, as []figures.Attach, devices, pods int) {
	// grid and axes
	for e := xMinLog; e <= xMaxLog; e++ {
		x := xPos(r, math.Pow(10, e))
		vline(img, x, r.Min.Y, r.Max.Y, grey)
		label := fmt.Sprintf("%.0f", math.Pow(10, e))
		drawText(img, x-textWidth(label, 1)/2, r.Max.Y+6, 1, label, black)
	}
	for _, q := range []float64{0.5, 0.99} {
		y := yPos(r, q)
		for x := r.Min.X; x < r.Max.X; x += 6 {
			hline(img, x, x+3, y, grey)
		}
	}
	drawText(img, r.Min.X-30, yPos(r, 0.5)-3, 1, "P50", black)
	drawText(img, r.Min.X-30, yPos(r, 0.99)+2, 1, "P99", black)
	drawText(img, r.Min.X-30, r.Max.Y-7, 1, "0", black)
	hline(img, r.Min.X, r.Max.X, r.Max.Y, black)
	vline(img, r.Min.X, r.Min.Y, r.Max.Y, black)
	for _, m := range modes {
		a, ok := find(as, m.name, devices, pods)
		if !ok || len(a.Attach.Samples) == 0 {
			continue
		}
		cdf(img, r, a.Attach.Samples, m.c)
	}
}

// cdf draws the step function of the sorted samples.
func cdf(img *image.RGBA, r image.Rectangle, s []float64, c color.RGBA) {
	n := float64(len(s))
	px, py := xPos(r, s[0]), yPos(r, 0)
	for i, v := range s {
		x, y := xPos(r, v), yPos(r, float64(i+1)/n)
		thick(img, px, py, x, py, c)
		thick(img, x, py, x, y, c)
		px, py = x, y
	}
	thick(img, px, py, r.Max.X, py, c)
}

func xPos(r image.Rectangle, ms float64) int {
	l := math.Log10(math.Max(ms, 1))
	l = math.Min(math.Max(l, xMinLog), xMaxLog)
	return r.Min.X + int((l-xMinLog)/(xMaxLog-xMinLog)*float64(r.Dx()))
}

func yPos(r image.Rectangle, q float64) int { return r.Max.Y - int(q*float64(r.Dy())) }

func fill(img *image.RGBA, r image.Rectangle, c color.Color) {
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.Set(x, y, c)
		}
	}
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := min(x0, x1); x <= max(x0, x1); x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := min(y0, y1); y <= max(y0, y1); y++ {
		img.Set(x, y, c)
	}
}

// thick draws a horizontal or vertical segment two pixels wide.
func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	if y0 == y1 {
		hline(img, x0, x1, y0, c)
		hline(img, x0, x1, y0+1, c)
		return
	}
	vline(img, x0, y0, y1, c)
	vline(img, x0+1, y0, y1, c)
}
