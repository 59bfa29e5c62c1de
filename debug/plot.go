package debug

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
)

// plotSeries are the metrics drawn, one line each.
var plotSeries = []struct {
	name string
	c    color.RGBA
	get  func(s TapStat) float64
}{
	{"err/scale", color.RGBA{0x1f, 0x77, 0xb4, 255}, func(s TapStat) float64 { return float64(s.NormErr) }},
	{"max abs", color.RGBA{0xff, 0x7f, 0x0e, 255}, func(s TapStat) float64 { return float64(s.MaxAbs) }},
	{"max rel", color.RGBA{0x2c, 0xa0, 0x2c, 255}, func(s TapStat) float64 { return float64(s.MaxRel) }},
	{"ulp p99", color.RGBA{0x94, 0x67, 0xbd, 255}, func(s TapStat) float64 { return float64(s.ULP99) }},
	{"ulp max", color.RGBA{0x8c, 0x56, 0x4b, 255}, func(s TapStat) float64 { return float64(s.ULPMax) }},
	{"1 - cosine", color.RGBA{0xe3, 0x77, 0xc2, 255}, func(s TapStat) float64 { return 1 - float64(s.Cosine) }},
}

// Plot draws the error growth through the layers: one line per metric
// (err/scale, max abs, max rel, ULP p99, ULP max, 1 - cosine) over the taps
// in graph order, on a log scale, with the err/scale limit dashed, layer
// boundaries, the first failing tap marked and a legend. Zeros (bit-identical
// taps) sit on the bottom edge.
func Plot(r *Report) *image.RGBA {
	const W, H, left, right, top, bottom = 1420, 640, 90, 320, 50, 110
	img := image.NewRGBA(image.Rect(0, 0, W, H))
	fill(img, 0, 0, W, H, color.RGBA{255, 255, 255, 255})
	black, grid := color.RGBA{0, 0, 0, 255}, color.RGBA{0xdd, 0xdd, 0xdd, 255}
	pw, ph := W-left-right, H-top-bottom
	n := len(r.Taps)

	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range r.Taps {
		vals := []float64{float64(s.Limit)}
		for _, ps := range plotSeries {
			vals = append(vals, ps.get(s))
		}
		for _, v := range vals {
			if v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
				lo, hi = math.Min(lo, math.Log10(v)), math.Max(hi, math.Log10(v))
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = -8, 0
	}
	lo, hi = math.Floor(lo)-1, math.Ceil(hi)
	if hi <= lo {
		hi = lo + 1
	}
	xAt := func(i int) int {
		if n <= 1 {
			return left + pw/2
		}
		return left + i*pw/(n-1)
	}
	yAt := func(v float64) int {
		lv := lo
		if v > 0 && !math.IsNaN(v) {
			lv = math.Min(math.Max(math.Log10(v), lo), hi)
		} else if math.IsInf(v, 1) || math.IsNaN(v) {
			lv = hi
		}
		return top + ph - int(float64(ph)*(lv-lo)/(hi-lo))
	}

	// Grid: decades and layer starts.
	every := 1 + int(hi-lo)/12
	for d := int(lo); d <= int(hi); d++ {
		y := yAt(math.Pow(10, float64(d)))
		line(img, left, y, left+pw, y, grid, 1, false)
		if (d-int(lo))%every == 0 {
			lab := fmt.Sprintf("1e%d", d)
			drawText(img, left-8-textWidth(lab, 2), y-7, lab, 2, black)
		}
	}
	for i, s := range r.Taps {
		lab := ""
		switch {
		case s.Name == "embed", s.Name == "norm", s.Name == "logits":
			lab = s.Name
		case s.Layer >= 0 && (i == 0 || r.Taps[i-1].Layer != s.Layer):
			lab = fmt.Sprintf("l%d", s.Layer)
		}
		if lab == "" {
			continue
		}
		x := xAt(i)
		line(img, x, top, x, top+ph, grid, 1, false)
		line(img, x, top+ph, x, top+ph+6, black, 1, false)
		y := top + ph + 12
		if s.Layer < 0 {
			y += 20
		}
		if s.Name == "logits" {
			y += 20
		}
		drawText(img, x-textWidth(lab, 2)/2, y, lab, 2, black)
	}
	drawText(img, left+pw/2-textWidth("taps in graph order", 2)/2, H-24, "taps in graph order", 2, black)
	title := fmt.Sprintf("%s: A=%s vs B=%s, prompt of %d tokens", r.Checkpoint, r.ALabel, r.BLabel, len(r.PromptIDs))
	drawText(img, left, 16, title, 2, black)

	// First failing tap.
	for i, s := range r.Taps {
		if s.Name == r.FirstFail {
			x := xAt(i)
			red := color.RGBA{0xd6, 0x27, 0x28, 255}
			line(img, x, top, x, top+ph, red, 2, true)
			drawText(img, x+4, top+4, "first fail: "+s.Name, 2, red)
		}
	}
	// Limit and series.
	gray := color.RGBA{0x77, 0x77, 0x77, 255}
	if !r.Exact {
		for i := 1; i < n; i++ {
			line(img, xAt(i-1), yAt(float64(r.Taps[i-1].Limit)), xAt(i), yAt(float64(r.Taps[i].Limit)), gray, 1, true)
		}
	}
	for _, ps := range plotSeries {
		for i, s := range r.Taps {
			x, y := xAt(i), yAt(ps.get(s))
			fill(img, x-2, y-2, x+3, y+3, ps.c)
			if i > 0 {
				line(img, xAt(i-1), yAt(ps.get(r.Taps[i-1])), x, y, ps.c, 2, false)
			}
		}
	}
	// Axes.
	line(img, left, top, left, top+ph, black, 1, false)
	line(img, left, top+ph, left+pw, top+ph, black, 1, false)

	// Legend.
	lx, ly := left+pw+50, top+10
	for k, ps := range plotSeries {
		y := ly + 24*k
		line(img, lx, y+7, lx+30, y+7, ps.c, 3, false)
		drawText(img, lx+40, y, ps.name, 2, black)
	}
	y := ly + 24*len(plotSeries)
	if !r.Exact {
		line(img, lx, y+7, lx+30, y+7, gray, 1, true)
		drawText(img, lx+40, y, "limit (err/scale)", 2, black)
		y += 24
	}
	drawText(img, lx, y+10, "zero (bit-identical):", 2, gray)
	drawText(img, lx, y+30, "on the bottom edge", 2, gray)
	return img
}

// PlotPNG writes Plot(r) to path as PNG.
func PlotPNG(r *Report, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("debug: plot: %w", err)
	}
	if err := png.Encode(f, Plot(r)); err != nil {
		f.Close()
		return fmt.Errorf("debug: plot %s: %w", path, err)
	}
	return f.Close()
}

func fill(img *image.RGBA, x0, y0, x1, y1 int, c color.Color) {
	for y := y0; y < y1; y++ {
		for x := x0; x < x1; x++ {
			img.Set(x, y, c)
		}
	}
}

// line draws from (x0, y0) to (x1, y1), w pixels thick, dashed or solid.
func line(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, w int, dashed bool) {
	dx, dy := x1-x0, y1-y0
	steps := max(abs(dx), abs(dy), 1)
	for k := 0; k <= steps; k++ {
		if dashed && (k/6)%2 == 1 {
			continue
		}
		x := x0 + dx*k/steps
		y := y0 + dy*k/steps
		fill(img, x-w/2, y-w/2, x-w/2+w, y-w/2+w, c)
	}
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
