package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/generate"
)

// cmdDefault is mlxgo without arguments (make run): greedy generation on
// the embedded optiq-f32 checkpoint on every backend compiled in, checked
// token for token against mlx_lm's, then the conformance summary over the
// repository's fixtures (or, outside the repository, the embedded
// checkpoint's cases). It exits 1 if any token differs or anything fails.
func cmdDefault(stdout, stderr io.Writer) int {
	ok, err := runDefault(stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "mlxgo:", err)
		return 1
	}
	if !ok {
		fmt.Fprintln(stdout, "RESULT: FAIL")
		return 1
	}
	fmt.Fprintln(stdout, "RESULT: ok")
	return 0
}

func runDefault(stdout, stderr io.Writer) (bool, error) {
	dir, cleanup, err := conformance.DefaultCheckpoint()
	if err != nil {
		return false, err
	}
	defer cleanup()
	g, err := loadGreedyCase(filepath.Join(dir, conformance.DefaultGreedyCase.Path))
	if err != nil {
		return false, err
	}
	names := backend.Names()
	fmt.Fprintf(stdout, "mlxgo: embedded checkpoint optiq-f32 (tiny MiniCPM5-architecture Llama, OptiQ-like 4/8-bit mix, float32), backends: %v\n", names)
	fmt.Fprintf(stdout, "prompt ids (%d): %v\n", len(g.prompt), g.prompt)
	allOK := true
	for _, name := range names {
		same, err := defaultGenerate(name, dir, g, stdout, stderr)
		if err != nil {
			return false, fmt.Errorf("backend %s: %w", name, err)
		}
		allOK = allOK && same
	}

	var cases []*conformance.Case
	if p, found := findUp("conformance/testdata/manifest.json"); found {
		fixtures := filepath.Dir(p)
		fmt.Fprintf(stdout, "\nconformance: fixtures in %s\n", fixtures)
		cases, err = conformance.Load(fixtures)
	} else {
		fmt.Fprintln(stdout, "\nconformance: repository fixtures not found; running the embedded checkpoint's cases")
		cases, err = conformance.CheckpointCases(dir)
	}
	if err != nil {
		return false, err
	}
	results, err := conformCases(cases, names, stderr)
	if err != nil {
		return false, err
	}
	printConformTable(stdout, results, names, false)
	for _, r := range results {
		allOK = allOK && r.Pass
	}
	return allOK, nil
}

// greedyCase is what the default run needs from the greedy case.
type greedyCase struct {
	prompt, tokens         []int32
	maxTokens, prefillStep int
}

func loadGreedyCase(path string) (*greedyCase, error) {
	c, err := conformance.LoadCase(path)
	if err != nil {
		return nil, err
	}
	a, err := c.OpenArrays()
	if err != nil {
		return nil, err
	}
	defer a.Close()
	in, err := a.Input("ids")
	if err != nil {
		return nil, err
	}
	out, err := a.Output("tokens")
	if err != nil {
		return nil, err
	}
	g := &greedyCase{prompt: slices.Clone(in.Int32s())} // Int32s is a view of the mapped file
	for _, v := range out.ToFloat64() {
		g.tokens = append(g.tokens, int32(v))
	}
	if g.maxTokens, err = c.Int("max_tokens"); err != nil {
		return nil, err
	}
	if g.prefillStep, err = c.Int("prefill_step_size"); err != nil {
		return nil, err
	}
	return g, nil
}

// defaultGenerate loads the checkpoint on one backend, generates greedily
// and reports whether the tokens equal mlx_lm's.
func defaultGenerate(name, dir string, g *greedyCase, stdout, stderr io.Writer) (bool, error) {
	fmt.Fprintf(stderr, "mlxgo: %s: loading and generating %d tokens...\n", name, g.maxTokens)
	b, err := backend.Open(name, backend.Options{})
	if err != nil {
		return false, err
	}
	defer b.Close()
	start := time.Now()
	m, err := loadModel(b, dir)
	if err != nil {
		return false, err
	}
	defer b.Do(func() error { return m.Close() })
	fmt.Fprintf(stdout, "\n[%s] loaded in %s\n", name, ms(time.Since(start)))
	res, err := generate.Generate(m, g.prompt, generate.Options{MaxTokens: g.maxTokens, PrefillStepSize: g.prefillStep}, nil)
	if err != nil {
		return false, err
	}
	fmt.Fprintf(stdout, "[%s] tokens (%d): %v\n", name, len(res.Tokens), res.Tokens)
	same := slices.Equal(res.Tokens, g.tokens)
	if same {
		fmt.Fprintf(stdout, "[%s] equal to mlx_lm's: yes (all %d tokens, exact)\n", name, len(g.tokens))
	} else {
		fmt.Fprintf(stdout, "[%s] equal to mlx_lm's: NO — %s\n", name, firstDifference(res.Tokens, g.tokens))
		fmt.Fprintf(stdout, "[%s] mlx_lm's tokens (%d): %v\n", name, len(g.tokens), g.tokens)
	}
	fmt.Fprintf(stdout, "[%s] %s\n", name, statsLine(res))
	return same, nil
}

func firstDifference(got, want []int32) string {
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("first difference at token %d: got %d, want %d", i, got[i], want[i])
		}
	}
	return fmt.Sprintf("got %d tokens, want %d", len(got), len(want))
}

// conformCases runs cases on every named backend, with each model
// checkpoint loaded once per backend, showing progress on progress.
func conformCases(cases []*conformance.Case, names []string, progress io.Writer) ([]conformance.Result, error) {
	var all []conformance.Result
	for _, name := range names {
		b, err := backend.Open(name, backend.Options{})
		if err != nil {
			return nil, err
		}
		if err := conformance.LoadModels(b, cases); err != nil {
			b.Close()
			return nil, err
		}
		for i, c := range cases {
			if i%50 == 0 && isTerminal(progress) {
				fmt.Fprintf(progress, "\rconform: %s %d/%d cases", name, i, len(cases))
			}
			all = append(all, conformance.Check(b, c)...)
		}
		fmt.Fprintf(progress, "\rconform: %s %d/%d cases\n", name, len(cases), len(cases))
		err = conformance.ReleaseModels(b)
		if cerr := b.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing backend %s: %w", name, cerr)
		}
		if err != nil {
			return nil, err
		}
	}
	return all, nil
}

// isTerminal reports whether w is a terminal, where a progress line may be
// redrawn in place with \r; logs get only the final line.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
