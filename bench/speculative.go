package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// A speculative sweep (`mlxgo bench --draft-model DIR` or `--prompt-lookup
// N`) measures greedy decoding of one text prompt with and without
// speculation: the decode rate of plain greedy generation, then of
// speculative generation (a draft model, or prompt lookup), their ratio,
// and how many drafted tokens the model accepted. The Go configurations run
// generate.Session's Generate and GenerateSpeculative in a child process;
// llama.cpp runs llama-speculative-simple on the GGUF twins (a draft model,
// or --spec-type ngram-simple for prompt lookup) with llama-bench's tgN as
// its plain rate.

// SpecSweepOptions configure a speculative sweep.
type SpecSweepOptions struct {
	Model, GGUF string // the model and its GGUF twin
	// Draft and DraftGGUF are the draft model and its twin ("": prompt
	// lookup with Lookup).
	Draft, DraftGGUF string
	Lookup           int // prompt lookup's n-gram size (with Draft "")
	NumDraft         int // tokens drafted per step
	Prompt           string
	Self             []string
	// LlamaSpeculative is llama-speculative-simple, LlamaBench llama-bench
	// ("" skips llama.cpp).
	LlamaSpeculative, LlamaBench string
	Configs                      []string // Go configurations (and llama.cpp)
	DecodeTokens                 int
	Reps, Warmup                 int
	Threads                      int
	Progress                     io.Writer
}

// SpecSweepResult is a whole speculative sweep.
type SpecSweepResult struct {
	Date         string             `json:"date"`
	CPU          string             `json:"cpu"`
	Cores        int                `json:"cores"`
	GoVersion    string             `json:"go_version"`
	LoadAvgStart string             `json:"loadavg_start"`
	LoadAvgEnd   string             `json:"loadavg_end"`
	Model        string             `json:"model"`
	Draft        string             `json:"draft,omitempty"`
	Lookup       int                `json:"prompt_lookup,omitempty"`
	NumDraft     int                `json:"num_draft_tokens"`
	Prompt       string             `json:"prompt"`
	PromptTokens int                `json:"prompt_tokens"`
	DecodeTokens int                `json:"decode_tokens"`
	Configs      []SpecConfigResult `json:"configs"`
}

// SpecConfigResult is one configuration's plain and speculative rates.
type SpecConfigResult struct {
	Name       string  `json:"name"`
	Device     string  `json:"device"`
	Plain      Stat    `json:"plain_tps"`
	Spec       Stat    `json:"speculative_tps"`
	AcceptRate float64 `json:"accept_rate"` // accepted / drafted over the timed runs
	Note       string  `json:"note,omitempty"`
	Err        string  `json:"error,omitempty"`
}

// SpecChildOptions are a Go child's speculative plan.
type SpecChildOptions struct {
	ChildOptions        // Model, backend, IDs (the prompt), DecodeTokens, reps
	Draft        string // draft model directory, or "" for prompt lookup
	Lookup       int
	NumDraft     int
}

// RunSpecChild times plain greedy generation and speculative generation
// of o.IDs on the backend and prints a ChildReport whose runs are of kind
// "plain" and "speculative" (Seconds from the first token to the last,
// Generated tokens after the first, PromptTokens drafted and Batch
// accepted: see specRecord).
func RunSpecChild(o SpecChildOptions, stdout, stderr io.Writer) error {
	if o.DecodeTokens < 3 || o.Reps < 1 || o.Warmup < 0 || o.NumDraft < 1 || (o.Draft == "") == (o.Lookup < 1) {
		return fmt.Errorf("bench child: a speculative plan takes decode tokens >= 3, reps >= 1, --num-draft-tokens >= 1 and a draft model or a prompt-lookup size")
	}
	b, err := backend.Open(o.Backend, o.Options)
	if err != nil {
		return err
	}
	defer b.Close()
	m, err := load(b, o.Model, "", stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	rep := ChildReport{Engine: "mlxgo", Device: o.Backend + " " + o.Options.Precision}
	var d generate.Drafter
	if o.Draft != "" {
		dm, err := load(b, o.Draft, "draft model: ", stderr)
		if err != nil {
			return fmt.Errorf("draft model: %w", err)
		}
		defer dm.Close()
		if dm.VocabSize() != m.VocabSize() {
			return fmt.Errorf("draft model %s: vocabulary %d, the model's %d", o.Draft, dm.VocabSize(), m.VocabSize())
		}
		dr, err := generate.NewDraftModel[nn.KVCache](dm)
		if err != nil {
			return err
		}
		defer dr.Release()
		d = dr
	} else if d, err = generate.NewPromptLookup(o.Lookup); err != nil {
		return err
	}
	for _, kind := range []string{"plain", "speculative"} {
		for r := range o.Warmup + o.Reps {
			s, err := generate.NewSession[nn.KVCache](m)
			if err != nil {
				return err
			}
			var times []float64
			var t0 time.Time
			on := func(generate.Token) bool {
				if times == nil {
					t0 = time.Now()
				}
				times = append(times, time.Since(t0).Seconds())
				return true
			}
			opts := generate.Options{MaxTokens: o.DecodeTokens}
			rec := RunRecord{Kind: kind, Prompt: len(o.IDs), Warmup: r < o.Warmup}
			if kind == "plain" {
				_, err = s.Generate(o.IDs, opts, on)
			} else {
				var res generate.SpeculativeResult
				res, err = s.GenerateSpeculative(o.IDs, d, generate.SpeculativeOptions{Options: opts, NumDraftTokens: o.NumDraft}, on)
				rec.PromptTokens, rec.Batch = res.Drafted, res.Accepted
			}
			s.Release()
			if err != nil {
				return fmt.Errorf("bench child: %s generation: %w", kind, err)
			}
			if len(times) < 2 {
				return fmt.Errorf("bench child: %s generation gave %d tokens, want at least 2", kind, len(times))
			}
			rec.Seconds, rec.Generated = times[len(times)-1], len(times)-1
			rep.Runs = append(rep.Runs, rec)
			fmt.Fprintf(stderr, "bench child %s: %s %s: %d tokens, %.1f tok/s after the first", rep.Device, kind, repName(r, o.Warmup, o.Reps), len(times), float64(rec.Generated)/rec.Seconds)
			if kind == "speculative" {
				fmt.Fprintf(stderr, ", %d of %d drafted accepted", rec.Batch, rec.PromptTokens)
			}
			fmt.Fprintln(stderr)
		}
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// RunSpecSweep runs the sweep over the selected configurations.
func RunSpecSweep(o SpecSweepOptions) (*SpecSweepResult, error) {
	configs, err := selectConfigs(o.Configs)
	if err != nil {
		return nil, err
	}
	if o.DecodeTokens < 3 || o.Reps < 1 || o.Warmup < 0 || o.NumDraft < 1 || (o.Draft == "") == (o.Lookup < 1) || o.Prompt == "" {
		return nil, fmt.Errorf("bench: speculative sweep: want a prompt, decode tokens >= 3, reps >= 1, --num-draft-tokens >= 1, and --draft-model or --prompt-lookup")
	}
	tok, err := tokenizer.Load(o.Model)
	if err != nil {
		return nil, fmt.Errorf("bench: speculative sweep needs the model's tokenizer: %w", err)
	}
	ids := tok.Encode(o.Prompt)
	res := &SpecSweepResult{Date: time.Now().Format(time.RFC3339), CPU: cpuModel(), Cores: runtime.NumCPU(), GoVersion: runtime.Version(),
		LoadAvgStart: loadAvg(), Model: o.Model, Draft: o.Draft, Lookup: o.Lookup, NumDraft: o.NumDraft, Prompt: o.Prompt,
		PromptTokens: len(ids), DecodeTokens: o.DecodeTokens}
	tmp, err := os.MkdirTemp("", "mlxgo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	idsFile := filepath.Join(tmp, "ids.json")
	if data, err := json.Marshal(ids); err != nil || os.WriteFile(idsFile, data, 0o644) != nil {
		return nil, fmt.Errorf("bench: writing %s: %v", idsFile, err)
	}
	h := &Options{Progress: o.Progress}
	for _, name := range configs {
		var cr SpecConfigResult
		switch name {
		case "mlx_lm":
			continue // mlx_lm's speculative decoding is not driven here
		case "llama.cpp":
			if o.LlamaSpeculative == "" || o.GGUF == "" || o.Draft != "" && o.DraftGGUF == "" {
				h.logf("llama.cpp skipped: no --llama-speculative or no GGUF twins")
				continue
			}
			h.logf("=== llama.cpp: llama-speculative-simple")
			cr = o.runLlamaSpec(h)
		default:
			if _, _, err := ParseConfig(name); err != nil {
				return nil, err
			}
			h.logf("=== %s: plain and speculative", name)
			argv := append(slices.Clone(o.Self), "--config", name, "--model", o.Model, "--ids-file", idsFile,
				"--prompt-lens", strconv.Itoa(len(ids)), "--decode-tokens", strconv.Itoa(o.DecodeTokens), "--reps", strconv.Itoa(o.Reps),
				"--warmup", strconv.Itoa(o.Warmup), "--num-draft-tokens", strconv.Itoa(o.NumDraft))
			if o.Draft != "" {
				argv = append(argv, "--draft-model", o.Draft)
			} else {
				argv = append(argv, "--prompt-lookup", strconv.Itoa(o.Lookup))
			}
			cr = runSpecChild(h, argv)
		}
		cr.Name = name
		if cr.Err != "" {
			h.logf("%s failed: %s", name, cr.Err)
		}
		res.Configs = append(res.Configs, cr)
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

// runSpecChild runs a Go child and summarises its runs.
func runSpecChild(h *Options, argv []string) SpecConfigResult {
	var cr SpecConfigResult
	rep, _, err := runReport("speculative child", h.Progress, argv)
	if err != nil {
		cr.Err = err.Error()
		return cr
	}
	cr.Device = rep.Device
	var plain, spec []float64
	drafted, accepted := 0, 0
	for _, r := range rep.Runs {
		if r.Warmup || r.Seconds <= 0 {
			continue
		}
		rate := float64(r.Generated) / r.Seconds
		if r.Kind == "plain" {
			plain = append(plain, rate)
		} else {
			spec = append(spec, rate)
			drafted, accepted = drafted+r.PromptTokens, accepted+r.Batch
		}
	}
	cr.Plain, cr.Spec = NewStat(plain), NewStat(spec)
	if drafted > 0 {
		cr.AcceptRate = float64(accepted) / float64(drafted)
	}
	return cr
}

var (
	llamaDecoded  = regexp.MustCompile(`decoded\s+(\d+) tokens in\s+([0-9.]+) seconds`)
	llamaDrafted  = regexp.MustCompile(`n_drafted\s*=\s*(\d+)`)
	llamaAccepted = regexp.MustCompile(`n_accept\s*=\s*(\d+)`)
)

// runLlamaSpec runs llama-speculative-simple once per repetition (greedy,
// the same prompt and token count) and llama-bench's tgN for the plain rate.
func (o *SpecSweepOptions) runLlamaSpec(h *Options) SpecConfigResult {
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	cr := SpecConfigResult{Device: fmt.Sprintf("cpu %d threads", threads)}
	argv := []string{o.LlamaSpeculative, "-m", o.GGUF, "-p", o.Prompt, "-n", strconv.Itoa(o.DecodeTokens), "--temp", "0",
		"-t", strconv.Itoa(threads), "-c", "4096", "--spec-draft-n-max", strconv.Itoa(o.NumDraft), "--spec-draft-n-min", "0", "--spec-draft-p-min", "0"}
	if o.Draft != "" {
		argv = append(argv, "-md", o.DraftGGUF, "--spec-draft-threads", strconv.Itoa(threads))
	} else {
		argv = append(argv, "--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", strconv.Itoa(o.Lookup), "--spec-ngram-simple-size-m", strconv.Itoa(o.NumDraft))
	}
	var spec []float64
	drafted, accepted := 0, 0
	for r := range o.Warmup + o.Reps {
		var out bytes.Buffer
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout, cmd.Stderr = &out, &out
		h.logf("running %s", strings.Join(argv, " "))
		if err := cmd.Run(); err != nil {
			cr.Err = fmt.Sprintf("%s: %v: %s", strings.Join(argv, " "), err, lastLines(out.String(), 5))
			return cr
		}
		rate, d, a, err := parseLlamaSpec(out.String())
		if err != nil {
			cr.Err = err.Error()
			return cr
		}
		if r >= o.Warmup {
			spec = append(spec, rate)
			drafted, accepted = drafted+d, accepted+a
		}
	}
	cr.Spec = NewStat(spec)
	if drafted > 0 {
		cr.AcceptRate = float64(accepted) / float64(drafted)
	}
	if o.LlamaBench != "" {
		lb := (&Options{LlamaBench: o.LlamaBench, Threads: threads, Progress: o.Progress}).runLlamaBench(o.GGUF, runPlan{lens: []int{1}, decode: o.DecodeTokens, reps: o.Reps})
		if lb.Err != "" {
			cr.Err = lb.Err
			return cr
		}
		cr.Plain = lb.Decode
		cr.Note = "plain rate: llama-bench tgN (decode from an empty context); speculative: llama-speculative-simple's decoded tokens / decode time (after the prompt)"
	}
	return cr
}

// parseLlamaSpec reads llama-speculative-simple's closing statistics.
func parseLlamaSpec(out string) (rate float64, drafted, accepted int, err error) {
	m := llamaDecoded.FindStringSubmatch(out)
	d := llamaDrafted.FindStringSubmatch(out)
	a := llamaAccepted.FindStringSubmatch(out)
	if m == nil || d == nil || a == nil {
		return 0, 0, 0, fmt.Errorf("llama-speculative-simple printed no \"decoded N tokens in S seconds\", n_drafted and n_accept lines: %s", lastLines(out, 5))
	}
	n, _ := strconv.Atoi(m[1])
	sec, _ := strconv.ParseFloat(m[2], 64)
	drafted, _ = strconv.Atoi(d[1])
	accepted, _ = strconv.Atoi(a[1])
	if sec <= 0 {
		return 0, 0, 0, fmt.Errorf("llama-speculative-simple: decoded %d tokens in %s seconds", n, m[2])
	}
	return float64(n) / sec, drafted, accepted, nil
}

// lastLines returns the last n lines of s, for error messages.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// Markdown renders the sweep.
func (r *SpecSweepResult) Markdown() string {
	var sb strings.Builder
	how := fmt.Sprintf("draft model %s", filepath.Base(r.Draft))
	if r.Draft == "" {
		how = fmt.Sprintf("prompt lookup (n-gram %d)", r.Lookup)
	}
	fmt.Fprintf(&sb, "Speculative decoding, %s, %s (%d cores), %s; %s with %s, %d drafted per step; %d-token prompt, %d greedy tokens; load %s → %s\n\n",
		r.Date, r.CPU, r.Cores, r.GoVersion, filepath.Base(r.Model), how, r.NumDraft, r.PromptTokens, r.DecodeTokens, r.LoadAvgStart, r.LoadAvgEnd)
	sb.WriteString("| config | plain tok/s | speculative tok/s | speed-up | drafts accepted |\n|---|---|---|---|---|\n")
	for _, c := range r.Configs {
		if c.Err != "" {
			fmt.Fprintf(&sb, "| %s | failed: %s | | | |\n", c.Name, c.Err)
			continue
		}
		up := "—"
		if c.Plain.N > 0 && c.Spec.N > 0 {
			up = fmt.Sprintf("%.2f×", c.Spec.Median/c.Plain.Median)
		}
		fmt.Fprintf(&sb, "| %s | %s | %s | %s | %.0f%% |\n", c.Name, c.Plain.Format(1), c.Spec.Format(1), up, 100*c.AcceptRate)
	}
	for _, c := range r.Configs {
		if c.Note != "" {
			fmt.Fprintf(&sb, "\n%s: %s\n", c.Name, c.Note)
		}
	}
	return sb.String()
}

// WriteJSON writes the sweep to path.
func (r *SpecSweepResult) WriteJSON(path string) error { return writeJSON(path, r) }

// Failed reports whether a configuration failed.
func (r *SpecSweepResult) Failed() bool {
	for _, c := range r.Configs {
		if c.Err != "" {
			return true
		}
	}
	return false
}
