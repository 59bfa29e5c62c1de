package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/mlxgo/mlxgo/internal/safefile"
)

// Markdown renders the sweep as two tables (decode tok/s, then prefill
// tok/s, against context), a row per configuration and cache kind, each
// cell the median with its spread and its ratio to the row's first
// context; then the memory per cached token and the notes.
func (r *ContextResult) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Context sweep of %s: %d warm-up + %d reps per context; prefill = %d tokens appended at the context, decode = %d tokens generated from it.\n\n",
		r.Model, r.Warmup, r.Reps, r.Prefill, r.DecodeTokens)
	for _, what := range []string{"decode", "prefill"} {
		head := []string{"config", "cache", "B/token"}
		for _, c := range r.Contexts {
			head = append(head, fmt.Sprintf("%s tok/s @%s", what, contextLabel(c)))
		}
		b.WriteString("| " + strings.Join(head, " | ") + " |\n|")
		for range head {
			b.WriteString(" --- |")
		}
		b.WriteString("\n")
		for i := range r.Rows {
			row := &r.Rows[i]
			if row.Err != "" {
				fmt.Fprintf(&b, "| %s | %s | failed: %s |\n", row.Config, row.Kind, strings.ReplaceAll(row.Err, "|", "/"))
				continue
			}
			cells := []string{row.Config, row.Cache, bytesLabel(row.BytesPerToken)}
			var first float64
			for _, c := range r.Contexts {
				p, ok := row.point(c)
				st := p.DecodeTPS
				if what == "prefill" {
					st = p.PrefillTPS
				}
				if !ok || st.N == 0 {
					cells = append(cells, "—")
					continue
				}
				cell := st.Format(-1)
				if first == 0 {
					first = st.Median
				} else {
					cell += fmt.Sprintf(" (%.2f×)", st.Median/first)
				}
				depth := p.DecodeDepth
				if what == "prefill" {
					depth = p.PrefillDepth
				}
				if depth != c {
					cell += fmt.Sprintf(" at %d", depth)
				}
				cells = append(cells, cell)
			}
			b.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "Machine: %s, %d cores, %s; load average %s at start, %s at end.\n", r.CPU, r.Cores, r.GoVersion, r.LoadAvgStart, r.LoadAvgEnd)
	b.WriteString("Cells: median tok/s ±half the relative spread, (ratio to the row's first context); \"at N\" where the runs started at another depth (a rotating cache past its window cannot be trimmed back). " +
		"B/token: memory per cached token over all layers (mlxgo: the cache's arrays per slot; llama.cpp: its cache type's block size times the K and V widths). " +
		"Decode tok/s: (N-2) / (t[N-1] - t[1]) as in the main table; llama.cpp: llama-bench tgN at depth -d, ppP likewise.\n")
	for i := range r.Rows {
		row := &r.Rows[i]
		if row.Err != "" {
			continue
		}
		fmt.Fprintf(&b, "- %s (%s, %s)", row.Config, row.Device, row.Cache)
		if row.PeakRSSBytes > 0 {
			fmt.Fprintf(&b, ": peak RSS %.0f MB", float64(row.PeakRSSBytes)/1e6)
		}
		if row.Note != "" {
			fmt.Fprintf(&b, "; %s", row.Note)
		}
		b.WriteString(".\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "- Note: %s.\n", n)
	}
	return b.String()
}

// point returns the row's point at context c.
func (row *ContextRow) point(c int) (ContextPoint, bool) {
	for _, p := range row.Points {
		if p.Context == c {
			return p, true
		}
	}
	return ContextPoint{}, false
}

// contextLabel writes multiples of 1024 as "Nk".
func contextLabel(c int) string {
	if c >= 1024 && c%1024 == 0 {
		return fmt.Sprintf("%dk", c/1024)
	}
	return fmt.Sprint(c)
}

func bytesLabel(v float64) string {
	if v <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.0f", v)
}

// WriteJSON writes the sweep, indented, to path.
func (r *ContextResult) WriteJSON(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// ReadContextResult reads a sweep written by WriteJSON.
func ReadContextResult(path string) (*ContextResult, error) {
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	var r ContextResult
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("bench: %s: not a context sweep result: %w", path, err)
	}
	if len(r.Contexts) == 0 {
		return nil, fmt.Errorf("bench: %s: not a context sweep result (no contexts)", path)
	}
	return &r, nil
}
