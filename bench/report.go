package bench

import (
	"encoding/json"
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/mlxgo/mlxgo/internal/safefile"
)

// find returns the successful result of the named configuration.
func (r *Result) find(name string) *ConfigResult {
	for i := range r.Configs {
		if r.Configs[i].Name == name && r.Configs[i].Err == "" {
			return &r.Configs[i]
		}
	}
	return nil
}

// ratio formats a/b, or "—" when either is missing.
func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// prefillRatio compares prefill speed at the longest prompt both measured
// (pairedRatio where both have every round's value, else ratio).
func prefillRatio(c, ref *ConfigResult) string {
	if ref == nil {
		return "—"
	}
	best := -1
	var a, b PromptResult
	for _, p := range c.Prompts {
		if q, ok := ref.Prompt(p.Prompt); ok && p.PrefillTPS.N > 0 && p.Prompt > best {
			best, a, b = p.Prompt, p, q
		}
	}
	if best < 0 {
		return "—"
	}
	if s, ok := pairedRatio(a.Rounds, b.Rounds); ok {
		return fmt.Sprintf("%s @%d", s, best)
	}
	return fmt.Sprintf("%s @%d", ratio(a.PrefillTPS.Median, b.PrefillTPS.Median), best)
}

// decodeRatio compares decode speed (pairedRatio where both have every
// round's value, else ratio).
func decodeRatio(c, ref *ConfigResult) string {
	if s, ok := pairedRatio(c.DecodeRounds, ref.DecodeRounds); ok {
		return s
	}
	return ratio(c.Decode.Median, ref.Decode.Median)
}

// pairedRatio formats the median of the per-round ratios a[i]/b[i], with
// their range, e.g. "0.88× (0.85–0.92)": the two values of a round were
// measured minutes apart, so a machine whose speed drifts between rounds
// moves both. It reports false unless a and b hold the same two or more
// rounds, every value positive.
func pairedRatio(a, b []float64) (string, bool) {
	if len(a) < 2 || len(a) != len(b) {
		return "", false
	}
	rs := make([]float64, len(a))
	for i := range a {
		if a[i] <= 0 || b[i] <= 0 {
			return "", false
		}
		rs[i] = a[i] / b[i]
	}
	st := NewStat(rs)
	return fmt.Sprintf("%.2f× (%.2f–%.2f)", st.Median, st.Min, st.Max), true
}

// promptLens is every prompt length measured: the run's own, then those of
// reduced runs (MLX on its CPU), in order.
func (r *Result) promptLens() []int {
	lens := slices.Clone(r.PromptLens)
	_, cs := r.rows()
	for _, c := range cs {
		for _, p := range c.Prompts {
			if !slices.Contains(lens, p.Prompt) {
				lens = append(lens, p.Prompt)
			}
		}
	}
	return lens
}

// ReadResult reads a result written by WriteJSON.
func ReadResult(path string) (*Result, error) {
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var r Result
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: %s is not a bench result: %w", path, err)
	}
	if len(r.PromptLens) == 0 {
		return nil, fmt.Errorf("bench: %s is not a bench result: no prompt_lens", path)
	}
	return &r, nil
}

// The notes under the tables on how each value is computed.
const (
	valuesNote = "Values: median ±half the min–max spread over the timed repetitions (n=1: a single run). " +
		"Prefill tok/s = P / time of the P-token prompt through a fresh cache until its last position's logits are computed (llama.cpp: ppP)."
	decodeNote = "Decode tok/s over N generated tokens = (N-2) / (t[N-1] - t[1]) (llama.cpp: tgN at a depth of the first prompt length, -d, the context mlxgo's decode starts from)."
	ttftNote   = "TTFT: generation's time to the first token after the first prompt length (on an eager backend this includes the second decode step, " +
		"which pipelined generation computes before handing over the first token)."
	rssNote = "Each configuration ran in its own process; peak RSS is that process's over all its runs (ru_maxrss, or the peak it recorded before resetting it); " +
		"decode peak RSS is its peak over the generation runs alone (reset after the prefill runs; Linux; — where not measured)."
)

// Markdown renders the result as a table with notes: one row per
// configuration, or for a matrix run (Checkpoints) one per checkpoint and
// configuration (MatrixMarkdown).
func (r *Result) Markdown() string {
	if len(r.Checkpoints) > 0 {
		return r.MatrixMarkdown()
	}
	var b strings.Builder
	lens := r.promptLens()
	head := []string{"config", "device", "load s"}
	for _, p := range lens {
		head = append(head, fmt.Sprintf("prefill %d tok/s", p))
	}
	head = append(head, "TTFT s @prompt", "decode tok/s", "peak RSS MB", "decode peak RSS MB",
		"decode ×llama.cpp", "decode ×mlx_lm", "prefill ×llama.cpp", "prefill ×mlx_lm", "decode / BW limit")
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
	for range head {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	llama, mlxlm := r.find("llama.cpp"), r.find("mlx_lm")
	for i := range r.Configs {
		c := &r.Configs[i]
		if c.Err != "" {
			fmt.Fprintf(&b, "| %s | failed: %s |\n", c.Name, strings.ReplaceAll(c.Err, "|", "/"))
			continue
		}
		load := "—"
		if c.LoadS > 0 {
			load = fmt.Sprintf("%.3f", c.LoadS)
		}
		row := []string{c.Name, c.Device, load}
		for _, p := range lens {
			pr, _ := c.Prompt(p)
			row = append(row, pr.PrefillTPS.Format(-1))
		}
		ttft := c.TTFT.Format(3)
		if c.TTFT.N > 0 {
			ttft += fmt.Sprintf(" @%d", c.TTFTPrompt)
		}
		decPeak := "—"
		if c.DecodePeakRSSBytes > 0 {
			decPeak = fmt.Sprintf("%.0f", float64(c.DecodePeakRSSBytes)/1e6)
		}
		row = append(row, ttft, c.Decode.Format(-1), fmt.Sprintf("%.0f", float64(c.PeakRSSBytes)/1e6), decPeak)
		dec := func(ref *ConfigResult) string {
			if ref == nil || ref == c {
				return "—"
			}
			return ratio(c.Decode.Median, ref.Decode.Median)
		}
		pre := func(ref *ConfigResult) string {
			if ref == c {
				return "—"
			}
			return prefillRatio(c, ref)
		}
		frac := "—"
		if c.BandwidthFraction > 0 {
			frac = fmt.Sprintf("%.0f%%", 100*c.BandwidthFraction)
		}
		row = append(row, dec(llama), dec(mlxlm), pre(llama), pre(mlxlm), frac)
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	fmt.Fprintf(&b, "\nMachine: %s, %d cores, %s; load average %s at start, %s at end.\n", r.CPU, r.Cores, r.GoVersion, r.LoadAvgStart, r.LoadAvgEnd)
	fmt.Fprintf(&b, "Checkpoint: %s (%.0f MB of safetensors).\n", r.Model, float64(r.CheckpointBytes)/1e6)
	fmt.Fprintf(&b, "Read bandwidth: %.1f GB/s (%s). The bandwidth limit of decode is bandwidth / weight bytes per token", r.BandwidthGBs, r.BandwidthNote)
	seen := map[int64]bool{}
	for i := range r.Configs {
		if c := &r.Configs[i]; c.WeightBytesPerToken > 0 && !seen[c.WeightBytesPerToken] {
			seen[c.WeightBytesPerToken] = true
			what := "the MLX checkpoint"
			switch {
			case c.Engine == "llama.cpp":
				what = "the GGUF twin"
			case c.PackedBytes > 0:
				what = c.Name + " with its packed weights"
			}
			fmt.Fprintf(&b, "; %s reads %.0f MB/token → limit %.1f tok/s", what, float64(c.WeightBytesPerToken)/1e6, r.BandwidthGBs*1e9/float64(c.WeightBytesPerToken))
		}
	}
	b.WriteString(".\n")
	b.WriteString(valuesNote + " " + ttftNote + " " + decodeNote + " " + rssNote + "\n")
	for i := range r.Configs {
		c := &r.Configs[i]
		if c.Err == "" {
			fmt.Fprintf(&b, "- %s: %d warm-up + %d reps, %d decode tokens", c.Name, c.Warmup, c.Reps, c.DecodeTokens)
			if c.Note != "" {
				fmt.Fprintf(&b, "; %s", c.Note)
			}
			b.WriteString(".\n")
		}
	}
	if r.Rounds > 1 {
		fmt.Fprintf(&b, "- The repetitions were split over %d rounds, each a pass over every configuration in a fresh process with its own warm-up.\n", r.Rounds)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- Note: %s.\n", n)
	}
	return b.String()
}

// WriteJSON writes the result, indented, to path.
func (r *Result) WriteJSON(path string) error { return writeJSON(path, r) }

// writeJSON writes v to path as indented JSON, making its directory.
func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// WritePNG draws decode and prefill speeds per configuration as grouped
// bars (tok/s) and saves the chart to path.
func (r *Result) WritePNG(path string) (err error) {
	defer func() {
		if e := recover(); e != nil {
			err = fmt.Errorf("bench: drawing %s: %v", path, e)
		}
	}()
	p := plot.New()
	p.Title.Text = fmt.Sprintf("mlxgo bench, %s (%d cores)", r.CPU, r.Cores)
	p.Y.Label.Text = "tokens/s"
	var names []string
	var ok []*ConfigResult
	labels, cs := r.rows()
	for i, c := range cs {
		if c.Err == "" {
			names = append(names, strings.Replace(labels[i], " / ", "\n", 1))
			ok = append(ok, c)
		}
	}
	if len(ok) == 0 {
		return fmt.Errorf("bench: no successful configuration to chart")
	}
	series := []struct {
		label string
		value func(*ConfigResult) float64
	}{{fmt.Sprintf("decode (%d tokens)", r.DecodeTokens), func(c *ConfigResult) float64 { return c.Decode.Median }}}
	for _, l := range r.promptLens() {
		series = append(series, struct {
			label string
			value func(*ConfigResult) float64
		}{fmt.Sprintf("prefill %d", l), func(c *ConfigResult) float64 { pr, _ := c.Prompt(l); return pr.PrefillTPS.Median }})
	}
	w := vg.Points(14)
	top := 0.0
	for si, s := range series {
		vals := make(plotter.Values, len(ok))
		var xys plotter.XYs
		var labels []string
		for i, c := range ok {
			vals[i] = max(s.value(c), 0) // a missing value is a zero bar
			top = max(top, vals[i])
			xys = append(xys, plotter.XY{X: float64(i), Y: vals[i]})
			labels = append(labels, speedLabel(vals[i]))
		}
		bars, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(si)
		bars.LineStyle.Color = color.Black
		bars.Offset = w * vg.Length(si-len(series)/2)
		p.Add(bars)
		p.Legend.Add(s.label, bars)
		// The values above the bars: small ones (MLX on its CPU) are
		// invisible on a linear axis shared with llama.cpp's prefill.
		lab, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
		if err != nil {
			return err
		}
		for i := range lab.TextStyle {
			lab.TextStyle[i].Font.Size = vg.Points(7)
			lab.TextStyle[i].XAlign = -0.5
		}
		lab.Offset = vg.Point{X: bars.Offset, Y: vg.Points(2)}
		p.Add(lab)
	}
	p.Y.Min, p.Y.Max = 0, top*1.3+1
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return p.Save(vg.Length(max(6, 1.6*float64(len(names))))*vg.Inch, 5*vg.Inch, path)
}

// speedLabel prints a speed with three significant digits (at least the
// units), never in exponent form.
func speedLabel(v float64) string {
	switch {
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.2f", v)
}
