package debug

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
)

func g3(n Num) string {
	f := float64(n)
	if f == 0 {
		return "0"
	}
	return strconv.FormatFloat(f, 'g', 3, 64)
}

func shapeStr(s []int) string {
	p := make([]string, len(s))
	for i, v := range s {
		p[i] = strconv.Itoa(v)
	}
	return strings.Join(p, "x")
}

// tapRows is the tap table: a header and one row per tap.
func (r *Report) tapRows() [][]string {
	rows := [][]string{{"tap", "dtype", "shape", "max abs", "max rel", "ulp p50", "ulp p99", "ulp max", "1-cosine", "err/scale", "limit", "status"}}
	for _, s := range r.Taps {
		status := "ok"
		switch {
		case s.Error != "":
			status = "FAIL: " + s.Error
		case !s.Pass && s.Name == r.FirstFail:
			status = "FAIL <- first"
		case !s.Pass:
			status = "FAIL"
		}
		limit := g3(s.Limit)
		if s.Exact {
			limit = "exact"
		}
		rows = append(rows, []string{s.Name, s.DType, shapeStr(s.Shape), g3(s.MaxAbs), g3(s.MaxRel),
			strconv.FormatUint(s.ULP50, 10), strconv.FormatUint(s.ULP99, 10), strconv.FormatUint(s.ULPMax, 10),
			g3(1 - s.Cosine), g3(s.NormErr), limit, status})
	}
	return rows
}

func writeTable(w io.Writer, rows [][]string, markdown bool) {
	if markdown {
		for i, row := range rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
			if i == 0 {
				fmt.Fprintf(w, "|%s\n", strings.Repeat(" --- |", len(row)))
			}
		}
		return
	}
	width := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, c := range row {
			if i > 0 {
				b.WriteString("  ")
			}
			if i == len(row)-1 {
				b.WriteString(c)
			} else if i == 0 || i == 1 || i == 2 {
				fmt.Fprintf(&b, "%-*s", width[i], c)
			} else {
				fmt.Fprintf(&b, "%*s", width[i], c)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
}

// focus is the tap whose worst elements are listed: the first failing one,
// else the one with the largest err/scale.
func (r *Report) focus() *TapStat {
	if r.FirstFail != "" {
		return r.Tap(r.FirstFail)
	}
	var best *TapStat
	for i := range r.Taps {
		if best == nil || r.Taps[i].NormErr > best.NormErr {
			best = &r.Taps[i]
		}
	}
	return best
}

// Summary is the one-line result.
func (r *Report) Summary() string {
	regime := "cross-implementation tolerances (debug.ToleranceFor)"
	if r.Exact {
		regime = "exact (same implementation: bit-identical required)"
	}
	if r.Pass() {
		return fmt.Sprintf("all %d taps within tolerance; regime: %s", len(r.Taps), regime)
	}
	return fmt.Sprintf("first tap over tolerance: %s, made by %s; regime: %s", r.FirstFail, strings.Join(r.FirstFailOps, " -> "), regime)
}

// write renders the report as text or markdown.
func (r *Report) write(w io.Writer, markdown bool) {
	h := func(s string) {
		if markdown {
			fmt.Fprintf(w, "\n### %s\n\n", s)
		} else {
			fmt.Fprintf(w, "\n%s\n", s)
		}
	}
	fmt.Fprintf(w, "mlxgo diff: checkpoint %s, prompt ids %v\n", r.Checkpoint, r.PromptIDs)
	if markdown {
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "A = %s, B = %s (B is the reference of max rel; err/scale = max abs / max|B|)\n", r.ALabel, r.BLabel)
	if markdown {
		fmt.Fprintln(w)
	}
	writeTable(w, r.tapRows(), markdown)
	if len(r.OnlyA)+len(r.OnlyB) > 0 {
		fmt.Fprintf(w, "taps only in A: %v; only in B: %v\n", r.OnlyA, r.OnlyB)
	}
	if markdown {
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, r.Summary())
	if f := r.focus(); f != nil && len(f.Worst) > 0 {
		h(fmt.Sprintf("worst elements of %s (%s, shape %v)", f.Name, f.DType, f.Shape))
		rows := [][]string{{"index", "A", "B", "|A-B|", "ulps"}}
		for _, e := range f.Worst {
			rows = append(rows, []string{formatCoords(e.Index), strconv.FormatFloat(float64(e.A), 'g', 9, 64),
				strconv.FormatFloat(float64(e.B), 'g', 9, 64), g3(e.Abs), strconv.FormatUint(e.ULPs, 10)})
		}
		writeTable(w, rows, markdown)
	}
	for _, rp := range r.Replays {
		h(fmt.Sprintf("replay of %s in isolation (error of each engine against a plain float64 evaluation of the op on the same inputs)", rp.Tap))
		rows := [][]string{{"op", "inputs", "engine", "err/scale", "max abs", "ulp p50", "ulp p99", "ulp max", "limit", "status"}}
		for _, st := range rp.Steps {
			for _, er := range st.Results {
				eng := er.Engine
				if er.Side != "" {
					eng += " [" + er.Side + "]"
				}
				status := "ok"
				if er.Error != "" {
					status = "error: " + er.Error
				} else if er.Over {
					status = "OVER"
				}
				rows = append(rows, []string{st.Step.String(), st.Input, eng, g3(er.NormErr), g3(er.MaxAbs),
					strconv.FormatUint(er.ULP50, 10), strconv.FormatUint(er.ULP99, 10), strconv.FormatUint(er.ULPMax, 10), g3(er.Limit), status})
			}
			if p := st.Pair; p != nil {
				limit := g3(p.Limit)
				if p.Exact {
					limit = "exact"
				}
				status := "ok"
				if !p.Pass {
					status = "DIFFERS"
				}
				rows = append(rows, []string{st.Step.String(), st.Input, "A vs B", g3(p.NormErr), g3(p.MaxAbs), "", "", strconv.FormatUint(p.ULPMax, 10), limit, status})
			}
		}
		writeTable(w, rows, markdown)
		if markdown {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "verdict: %s\n", rp.Verdict)
		for _, n := range rp.Notes {
			fmt.Fprintf(w, "note: %s\n", n)
		}
	}
}

// WriteText writes the report as an aligned terminal table.
func (r *Report) WriteText(w io.Writer) { r.write(w, false) }

// WriteMarkdown writes the report as markdown tables.
func (r *Report) WriteMarkdown(w io.Writer) { r.write(w, true) }

// WriteJSON writes the report as indented JSON (non-finite numbers as the
// strings "inf", "-inf", "nan").
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", " ")
	return enc.Encode(r)
}
