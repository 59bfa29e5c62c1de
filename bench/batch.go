package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
)

// A batch sweep (`mlxgo bench --batch-sizes`) measures the aggregate decode
// rate of B sequences decoded together, for each batch size B: B prompts of
// PromptLen tokens (row i takes ids[i : i+PromptLen], so the rows differ)
// go through the engine's batch generator (generate.BatchGenerator,
// mlx_lm's BatchGenerator, llama-batched-bench), then DecodeTokens greedy
// tokens each. The rate is the tokens the decode steps emitted over the
// time spent in decode steps, as both generators count it (mlx_lm's
// generation_tokens / decode_time; llama-batched-bench's S_TG); the prompt
// processing is reported beside it.

// BatchSweepOptions configure a batch sweep.
type BatchSweepOptions struct {
	Model, GGUF string   // checkpoint directory and its GGUF twin ("" skips llama.cpp)
	Self        []string // command line of a Go child, e.g. {exe, "bench", "--child"}
	Python      string   // the virtualenv's python ("" skips mlx_lm)
	Driver      string   // bench/mlx_lm_driver.py
	// LlamaBatchedBench is llama.cpp's llama-batched-bench ("" skips it).
	LlamaBatchedBench string
	Configs           []string // as Options.Configs
	BatchSizes        []int
	PromptLen         int
	DecodeTokens      int
	Reps, Warmup      int
	Threads           int // llama.cpp threads; 0: runtime.NumCPU()
	Seed              uint64
	Progress          io.Writer
}

// BatchSweepResult is a whole batch sweep.
type BatchSweepResult struct {
	Date         string              `json:"date"`
	Host         string              `json:"host"`
	CPU          string              `json:"cpu"`
	Cores        int                 `json:"cores"`
	GoVersion    string              `json:"go_version"`
	LoadAvgStart string              `json:"loadavg_start"`
	LoadAvgEnd   string              `json:"loadavg_end"`
	Model        string              `json:"model"`
	GGUF         string              `json:"gguf,omitempty"`
	PromptLen    int                 `json:"prompt_len"`
	DecodeTokens int                 `json:"decode_tokens"`
	BatchSizes   []int               `json:"batch_sizes"`
	Configs      []BatchConfigResult `json:"configs"`
}

// BatchConfigResult is one configuration's sweep.
type BatchConfigResult struct {
	Name    string       `json:"name"`
	Engine  string       `json:"engine"`
	Device  string       `json:"device"`
	Reps    int          `json:"reps"`
	Warmup  int          `json:"warmup"`
	Points  []BatchPoint `json:"points"`
	Note    string       `json:"note,omitempty"`
	Err     string       `json:"error,omitempty"`
	PeakRSS int64        `json:"peak_rss_bytes"`
}

// BatchPoint is one batch size's measurements: aggregate decode tok/s (all
// rows' tokens per second of decode steps) and prompt tok/s.
type BatchPoint struct {
	Batch      int  `json:"batch"`
	DecodeTPS  Stat `json:"decode_tps"`
	PromptTPS  Stat `json:"prompt_tps"`
	Tokens     int  `json:"tokens"` // decode-step tokens of one timed run
	PromptRows int  `json:"prompt_rows,omitempty"`
}

// point returns the result at batch size b.
func (c *BatchConfigResult) point(b int) *BatchPoint {
	for i := range c.Points {
		if c.Points[i].Batch == b && c.Points[i].DecodeTPS.N > 0 {
			return &c.Points[i]
		}
	}
	return nil
}

// batchPrompts returns the sweep's B prompts: row i is ids[i : i+n].
func batchPrompts(ids []int32, b, n int) ([][]int32, error) {
	if n < 1 || b < 1 || b-1+n > len(ids) {
		return nil, fmt.Errorf("bench: batch %d of %d-token prompts needs %d ids, have %d", b, n, b-1+n, len(ids))
	}
	out := make([][]int32, b)
	for i := range out {
		out[i] = ids[i : i+n]
	}
	return out, nil
}

// RunBatchChild is a Go configuration's batch sweep in a child process:
// for each batch size, warm-up and timed runs of the batch generator with
// greedy decoding and no stop tokens; one JSON ChildReport on stdout (runs
// of kind "batch"), progress on stderr.
func RunBatchChild(o ChildOptions, sizes []int, stdout, stderr io.Writer) error {
	if len(o.PromptLens) != 1 || o.DecodeTokens < 2 || o.Reps < 1 || o.Warmup < 0 || len(sizes) == 0 {
		return fmt.Errorf("bench child: a batch sweep takes one prompt length, decode tokens >= 2, reps >= 1, warm-up >= 0 and batch sizes")
	}
	b, err := backend.Open(o.Backend, o.Options)
	if err != nil {
		return err
	}
	defer b.Close()
	start := time.Now()
	m, err := load(b, o.Model, "", stderr)
	if err != nil {
		return err
	}
	defer m.Close()
	rep := ChildReport{Engine: "mlxgo", Device: o.Backend, LoadS: time.Since(start).Seconds()}
	if o.Options.Precision != "" {
		rep.Device += " " + o.Options.Precision
	}
	if o.Options.Device != "" {
		rep.Device += " " + o.Options.Device
	}
	for _, bs := range sizes {
		prompts, err := batchPrompts(o.IDs, bs, o.PromptLens[0])
		if err != nil {
			return err
		}
		for r := range o.Warmup + o.Reps {
			g, err := generate.NewBatchGenerator(m, generate.BatchOptions{MaxTokens: o.DecodeTokens, CompletionBatchSize: bs, PrefillBatchSize: bs, NoLogprobs: true})
			if err != nil {
				return err
			}
			if _, err := g.Insert(prompts, nil); err != nil {
				g.Close()
				return err
			}
			for !g.Done() {
				if _, err := g.Next(); err != nil {
					g.Close()
					return fmt.Errorf("bench child %s: batch %d: %w", rep.Device, bs, err)
				}
			}
			s := g.Stats()
			g.Close()
			rec := RunRecord{Kind: "batch", Prompt: o.PromptLens[0], Batch: bs, Warmup: r < o.Warmup,
				Seconds: s.GenerationTime.Seconds(), Generated: s.GenerationTokens,
				PromptSeconds: s.PromptTime.Seconds(), PromptTokens: s.PromptTokens}
			rep.Runs = append(rep.Runs, rec)
			fmt.Fprintf(stderr, "bench child %s: batch %d %s: %d tokens in %.2fs of decode steps (%.1f tok/s), prompts %.2fs\n",
				rep.Device, bs, repName(r, o.Warmup, o.Reps), s.GenerationTokens, rec.Seconds, s.GenerationTPS(), rec.PromptSeconds)
		}
	}
	return json.NewEncoder(stdout).Encode(rep)
}

// summariseBatch turns a child's "batch" runs into points.
func summariseBatch(runs []RunRecord, sizes []int) []BatchPoint {
	var out []BatchPoint
	for _, bs := range sizes {
		var dec, pro []float64
		p := BatchPoint{Batch: bs}
		for _, r := range runs {
			if r.Kind != "batch" || r.Batch != bs || r.Warmup || r.Seconds <= 0 {
				continue
			}
			dec = append(dec, float64(r.Generated)/r.Seconds)
			if r.PromptSeconds > 0 {
				pro = append(pro, float64(r.PromptTokens)/r.PromptSeconds)
			}
			p.Tokens = r.Generated
		}
		p.DecodeTPS, p.PromptTPS = NewStat(dec), NewStat(pro)
		out = append(out, p)
	}
	return out
}

func intsArg(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// RunBatchSweep measures every selected configuration's batch sweep on one
// checkpoint: the Go configurations and mlx_lm in child processes, llama.cpp
// with llama-batched-bench on the GGUF twin. A configuration that fails is
// reported with its error.
func RunBatchSweep(o BatchSweepOptions) (*BatchSweepResult, error) {
	configs, err := selectConfigs(o.Configs)
	if err != nil {
		return nil, err
	}
	if len(o.BatchSizes) == 0 || o.PromptLen < 1 || o.DecodeTokens < 2 || o.Reps < 1 || o.Warmup < 0 {
		return nil, fmt.Errorf("bench: batch sweep: want batch sizes, a prompt length >= 1, decode tokens >= 2, reps >= 1, warm-up >= 0")
	}
	for _, b := range o.BatchSizes {
		if b < 1 || b > 256 {
			return nil, fmt.Errorf("bench: batch size %d: want 1..256", b)
		}
	}
	host, _ := os.Hostname()
	res := &BatchSweepResult{Date: time.Now().Format(time.RFC3339), Host: host, CPU: cpuModel(), Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAvgStart: loadAvg(), Model: o.Model, GGUF: o.GGUF,
		PromptLen: o.PromptLen, DecodeTokens: o.DecodeTokens, BatchSizes: o.BatchSizes}
	tmp, err := os.MkdirTemp("", "mlxgo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	ids, err := PromptIDs(o.Model, o.PromptLen+slices.Max(o.BatchSizes)-1, o.Seed)
	if err != nil {
		return nil, err
	}
	idsFile := filepath.Join(tmp, "ids.json")
	if data, err := json.Marshal(ids); err != nil || os.WriteFile(idsFile, data, 0o644) != nil {
		return nil, fmt.Errorf("bench: writing %s: %v", idsFile, err)
	}
	plan := []string{"--ids-file", idsFile, "--prompt-lens", strconv.Itoa(o.PromptLen), "--decode-tokens", strconv.Itoa(o.DecodeTokens),
		"--reps", strconv.Itoa(o.Reps), "--warmup", strconv.Itoa(o.Warmup), "--batch-sizes", intsArg(o.BatchSizes)}
	h := &Options{Progress: o.Progress}
	for _, name := range configs {
		var cr BatchConfigResult
		switch name {
		case "llama.cpp":
			if o.LlamaBatchedBench == "" || o.GGUF == "" {
				h.logf("llama.cpp skipped: no --llama-batched-bench or no GGUF twin")
				continue
			}
			h.logf("=== llama.cpp (llama-batched-bench): batch sizes %v", o.BatchSizes)
			cr = o.runLlamaBatched()
		case "mlx_lm":
			if o.Python == "" {
				continue
			}
			h.logf("=== mlx_lm: batch sizes %v", o.BatchSizes)
			cr = o.runBatchChild(h, name, "mlx_lm", append([]string{o.Python, o.Driver, "--model", o.Model}, plan...))
		default:
			if _, _, err := ParseConfig(name); err != nil {
				return nil, err
			}
			h.logf("=== %s: batch sizes %v", name, o.BatchSizes)
			cr = o.runBatchChild(h, name, "mlxgo", append(append(slices.Clone(o.Self), "--config", name, "--model", o.Model), plan...))
		}
		cr.Name, cr.Reps, cr.Warmup = name, o.Reps, o.Warmup
		if cr.Err != "" {
			h.logf("%s failed: %s", name, cr.Err)
		}
		res.Configs = append(res.Configs, cr)
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

// runBatchChild runs one configuration's child process and summarises it.
func (o *BatchSweepOptions) runBatchChild(h *Options, name, engine string, argv []string) BatchConfigResult {
	cr := BatchConfigResult{Engine: engine}
	rep, peak, err := runReport(name, h.Progress, argv)
	cr.PeakRSS = peak
	if err != nil {
		cr.Err = err.Error()
		return cr
	}
	cr.Device = rep.Device
	cr.Points = summariseBatch(rep.Runs, o.BatchSizes)
	return cr
}

// llamaBatchedEntry is one line of llama-batched-bench's jsonl output.
type llamaBatchedEntry struct {
	PP      int     `json:"pp"`
	TG      int     `json:"tg"`
	PL      int     `json:"pl"`
	TPP     float64 `json:"t_pp"`
	SpeedPP float64 `json:"speed_pp"`
	TTG     float64 `json:"t_tg"`
	SpeedTG float64 `json:"speed_tg"`
}

// runLlamaBatched runs llama-batched-bench once per repetition (it has no
// repetitions of its own) with every batch size: B prompts of PromptLen
// tokens (not shared), DecodeTokens generated for each.
func (o *BatchSweepOptions) runLlamaBatched() BatchConfigResult {
	cr := BatchConfigResult{Engine: "llama.cpp", Device: "cpu"}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	maxB := slices.Max(o.BatchSizes)
	ctx := maxB * (o.PromptLen + o.DecodeTokens)
	argv := []string{o.LlamaBatchedBench, "-m", o.GGUF, "-c", strconv.Itoa(ctx), "-b", "2048", "-ub", "512",
		"-npp", strconv.Itoa(o.PromptLen), "-ntg", strconv.Itoa(o.DecodeTokens), "-npl", intsArg(o.BatchSizes),
		"-t", strconv.Itoa(threads), "-tb", strconv.Itoa(threads), "--output-format", "jsonl"}
	cr.Device = fmt.Sprintf("cpu %d threads", threads)
	dec, pro := map[int][]float64{}, map[int][]float64{}
	tokens := map[int]int{}
	for r := range o.Warmup + o.Reps {
		var stdout bytes.Buffer
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout = &stdout
		cmd.Stderr = io.Discard
		(&Options{Progress: o.Progress}).logf("running %s", strings.Join(argv, " "))
		err := cmd.Run()
		cr.PeakRSS = max(cr.PeakRSS, maxRSS(cmd.ProcessState))
		if err != nil {
			cr.Err = fmt.Sprintf("%s: %v", strings.Join(argv, " "), err)
			return cr
		}
		n := 0
		for line := range bytes.Lines(stdout.Bytes()) {
			line = bytes.TrimSpace(line)
			if len(line) == 0 || line[0] != '{' {
				continue
			}
			var e llamaBatchedEntry
			if err := json.Unmarshal(line, &e); err != nil {
				cr.Err = fmt.Sprintf("llama-batched-bench output line is not its JSON: %v", err)
				return cr
			}
			n++
			if r < o.Warmup || e.TTG <= 0 {
				continue
			}
			dec[e.PL] = append(dec[e.PL], float64(e.PL*e.TG)/e.TTG)
			if e.TPP > 0 {
				pro[e.PL] = append(pro[e.PL], float64(e.PL*e.PP)/e.TPP)
			}
			tokens[e.PL] = e.PL * e.TG
		}
		if n == 0 {
			cr.Err = "llama-batched-bench printed no jsonl result"
			return cr
		}
	}
	for _, b := range o.BatchSizes {
		cr.Points = append(cr.Points, BatchPoint{Batch: b, DecodeTPS: NewStat(dec[b]), PromptTPS: NewStat(pro[b]), Tokens: tokens[b]})
	}
	cr.Note = "llama-batched-bench: S_TG = B·ntg / T_TG and S_PP = B·npp / T_PP, one process per repetition"
	return cr
}

// Markdown renders the sweep: aggregate decode tok/s per batch size and
// configuration, the ratio of the largest batch to batch 1, and each Go
// configuration's ratio to llama.cpp and mlx_lm at every batch size.
func (r *BatchSweepResult) Markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Batch sweep, %s, %s (%d cores), %s; %s: %d-token prompts, %d greedy tokens per row; load %s → %s\n\n",
		r.Date, r.CPU, r.Cores, r.GoVersion, filepath.Base(r.Model), r.PromptLen, r.DecodeTokens, r.LoadAvgStart, r.LoadAvgEnd)
	sb.WriteString("Aggregate decode tok/s (all rows' tokens per second of decode steps):\n\n| config |")
	for _, b := range r.BatchSizes {
		fmt.Fprintf(&sb, " B=%d |", b)
	}
	last := r.BatchSizes[len(r.BatchSizes)-1]
	fmt.Fprintf(&sb, " B=%d / B=%d |\n|---|", last, r.BatchSizes[0])
	for range r.BatchSizes {
		sb.WriteString("---|")
	}
	sb.WriteString("---|\n")
	for _, c := range r.Configs {
		fmt.Fprintf(&sb, "| %s |", c.Name)
		if c.Err != "" {
			fmt.Fprintf(&sb, " failed: %s |\n", c.Err)
			continue
		}
		for _, b := range r.BatchSizes {
			s := "—"
			if p := c.point(b); p != nil {
				s = p.DecodeTPS.Format(1)
			}
			fmt.Fprintf(&sb, " %s |", s)
		}
		ratio := "—"
		if p0, p1 := c.point(r.BatchSizes[0]), c.point(last); p0 != nil && p1 != nil {
			ratio = fmt.Sprintf("%.2f×", p1.DecodeTPS.Median/p0.DecodeTPS.Median)
		}
		fmt.Fprintf(&sb, " %s |\n", ratio)
	}
	for _, ref := range []string{"llama.cpp", "mlx_lm"} {
		rc := r.find(ref)
		if rc == nil {
			continue
		}
		fmt.Fprintf(&sb, "\nRatio to %s at each batch size:\n\n| config |", ref)
		for _, b := range r.BatchSizes {
			fmt.Fprintf(&sb, " B=%d |", b)
		}
		sb.WriteString("\n|---|")
		for range r.BatchSizes {
			sb.WriteString("---|")
		}
		sb.WriteString("\n")
		for _, c := range r.Configs {
			if c.Engine != "mlxgo" || c.Err != "" {
				continue
			}
			fmt.Fprintf(&sb, "| %s |", c.Name)
			for _, b := range r.BatchSizes {
				s := "—"
				if p, q := c.point(b), rc.point(b); p != nil && q != nil {
					s = fmt.Sprintf("%.2f×", p.DecodeTPS.Median/q.DecodeTPS.Median)
				}
				fmt.Fprintf(&sb, " %s |", s)
			}
			sb.WriteString("\n")
		}
	}
	for _, c := range r.Configs {
		if c.Note != "" {
			fmt.Fprintf(&sb, "\n%s: %s", c.Name, c.Note)
		}
	}
	sb.WriteString("\n")
	return sb.String()
}

// find returns the named configuration's successful result.
func (r *BatchSweepResult) find(name string) *BatchConfigResult {
	for i := range r.Configs {
		if r.Configs[i].Name == name && r.Configs[i].Err == "" {
			return &r.Configs[i]
		}
	}
	return nil
}

// WriteJSON writes the sweep to path.
func (r *BatchSweepResult) WriteJSON(path string) error { return writeJSON(path, r) }

// Failed reports whether a configuration failed.
func (r *BatchSweepResult) Failed() bool {
	for _, c := range r.Configs {
		if c.Err != "" {
			return true
		}
	}
	return false
}
