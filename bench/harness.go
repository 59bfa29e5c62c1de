package bench

import (
	"bytes"
	"cmp"
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
	"github.com/mlxgo/mlxgo/backend/cpu"
)

// Options configure a harness run.
type Options struct {
	Model string // MLX checkpoint directory (when Checkpoints is empty)
	GGUF  string // its GGUF twin, for llama-bench ("" skips llama.cpp)
	// Checkpoints, when not empty, make the run a matrix over them (Model
	// and GGUF are then unused).
	Checkpoints []Checkpoint
	// Rounds > 1 splits every configuration's Reps over that many passes
	// over all checkpoints and configurations (each a child process of its
	// own with its own warm-up); 0 or 1 runs them in one.
	Rounds     int
	Self       []string // command line of a Go child, e.g. {exe, "bench", "--child"}
	Python     string   // the virtualenv's python, for mlx_lm ("" skips mlx_lm)
	Driver     string   // bench/mlx_lm_driver.py
	LlamaBench string   // llama-bench binary ("" skips llama.cpp)
	// Configs selects configurations by name or prefix ("cpu" selects every
	// cpu-*); empty selects the defaults (DefaultConfigs).
	Configs      []string
	PromptLens   []int // prompt lengths, prefixes of the seeded ids
	DecodeTokens int   // tokens generated after the first prompt length (>= 3)
	Reps, Warmup int
	// Slow* replace PromptLens, DecodeTokens, Reps and Warmup for the MLX
	// engines when MLX's device is its CPU, whose quantized matmul is a
	// scalar loop on x86 (about 1 tok/s at MiniCPM5-1B's size).
	SlowPromptLens             []int
	SlowDecodeTokens, SlowReps int
	Threads                    int    // threads for llama-bench; 0: runtime.NumCPU()
	Seed                       uint64 // of the prompt ids
	Progress                   io.Writer
}

// Checkpoint is one checkpoint of a matrix run.
type Checkpoint struct {
	Name  string // its label in the table
	Model string // MLX checkpoint directory
	GGUF  string // its GGUF twin for llama.cpp; "" when it has none
	// NoGGUF says why GGUF is "" (the table's note on its missing ratios).
	NoGGUF string
}

// CheckpointResult is one checkpoint's configurations in a matrix run.
type CheckpointResult struct {
	Name            string `json:"name"`
	Model           string `json:"model"`
	GGUF            string `json:"gguf,omitempty"`
	CheckpointBytes int64  `json:"checkpoint_bytes"` // its safetensors files
	GGUFBytes       int64  `json:"gguf_bytes,omitempty"`
	// NoLlama says why there is no llama.cpp row to compare with ("" when
	// there is one).
	NoLlama string         `json:"no_llama,omitempty"`
	Configs []ConfigResult `json:"configs"`
}

// find returns the successful result of the named configuration.
func (c *CheckpointResult) find(name string) *ConfigResult {
	for i := range c.Configs {
		if c.Configs[i].Name == name && c.Configs[i].Err == "" {
			return &c.Configs[i]
		}
	}
	return nil
}

// ConfigResult is one configuration's measurements.
type ConfigResult struct {
	Name         string  `json:"name"`
	Engine       string  `json:"engine"`
	Device       string  `json:"device"`
	Note         string  `json:"note,omitempty"`
	Reps         int     `json:"reps"`
	Warmup       int     `json:"warmup"`
	DecodeTokens int     `json:"decode_tokens"`
	LoadS        float64 `json:"load_s"`
	PeakRSSBytes int64   `json:"peak_rss_bytes"`
	// DecodePeakRSSBytes is the child's peak resident set over its
	// generation runs alone (0: not measured).
	DecodePeakRSSBytes int64          `json:"decode_peak_rss_bytes,omitempty"`
	Prompts            []PromptResult `json:"prompts"`
	TTFT               Stat           `json:"ttft_s"`      // generation's time to first token
	TTFTPrompt         int            `json:"ttft_prompt"` // after a prompt of this length
	Decode             Stat           `json:"decode_tps"`
	// WeightBytesPerToken is what one decode step reads of this engine's
	// weights (every layer's, the head's, one embedding row): for a Go
	// configuration that packs its weights, the checkpoint's bytes less
	// the pages the packing gave back plus the packed bytes
	// (ReadBytesPerToken).
	WeightBytesPerToken int64 `json:"weight_bytes_per_token"`
	// PackedBytes and ReleasedBytes are the child's ChildReport fields.
	PackedBytes   int64 `json:"packed_bytes,omitempty"`
	ReleasedBytes int64 `json:"released_bytes,omitempty"`
	// BandwidthFraction is decode tok/s × WeightBytesPerToken / bandwidth.
	BandwidthFraction float64 `json:"bandwidth_fraction"`
	Err               string  `json:"error,omitempty"`
	// Rounds is how many child processes' runs are merged here (Reps in
	// all); 0 in results written before rounds existed.
	Rounds int `json:"rounds,omitempty"`
	// DecodeRounds is each round's median decode tok/s, in round order
	// (absent in results written before it existed).
	DecodeRounds []float64 `json:"decode_rounds,omitempty"`
	// BandwidthRounds is, per round, the read bandwidth in GB/s measured
	// just before the round's configurations of this checkpoint ran (a
	// run of two or more rounds; absent otherwise).
	BandwidthRounds []float64 `json:"bandwidth_rounds_gb_s,omitempty"`
}

// bandwidthFraction is decode tok/s × WeightBytesPerToken / bandwidth:
// with every round's decode and bandwidth, the median of the rounds' own
// fractions; else the decode median over bw (bytes per second).
func (c *ConfigResult) bandwidthFraction(bw float64) float64 {
	if n := len(c.DecodeRounds); n >= 2 && n == len(c.BandwidthRounds) {
		fs := make([]float64, n)
		for i, d := range c.DecodeRounds {
			if c.BandwidthRounds[i] <= 0 {
				return 0
			}
			fs[i] = d * float64(c.WeightBytesPerToken) / (c.BandwidthRounds[i] * 1e9)
		}
		return NewStat(fs).Median
	}
	if c.Decode.N > 0 && bw > 0 {
		return c.Decode.Median * float64(c.WeightBytesPerToken) / bw
	}
	return 0
}

// markRound records a single round's medians as its per-round values
// (DecodeRounds, PromptResult.Rounds), which mergeRound then joins.
func (c *ConfigResult) markRound() {
	if c.Decode.N > 0 {
		c.DecodeRounds = []float64{c.Decode.Median}
	}
	for i := range c.Prompts {
		if p := &c.Prompts[i]; p.PrefillTPS.N > 0 {
			p.Rounds = []float64{p.PrefillTPS.Median}
		}
	}
}

// Prompt returns the prefill result at prompt length p.
func (c *ConfigResult) Prompt(p int) (PromptResult, bool) {
	for _, r := range c.Prompts {
		if r.Prompt == p {
			return r, r.PrefillTPS.N > 0
		}
	}
	return PromptResult{}, false
}

// Result is a whole harness run.
type Result struct {
	Date            string         `json:"date"`
	Host            string         `json:"host"`
	CPU             string         `json:"cpu"`
	Cores           int            `json:"cores"`
	GoVersion       string         `json:"go_version"`
	LoadAvgStart    string         `json:"loadavg_start"`
	LoadAvgEnd      string         `json:"loadavg_end"`
	Model           string         `json:"model,omitempty"`
	CheckpointBytes int64          `json:"checkpoint_bytes,omitempty"`
	BandwidthGBs    float64        `json:"bandwidth_gb_s"`
	BandwidthNote   string         `json:"bandwidth_note"`
	PromptLens      []int          `json:"prompt_lens"`
	DecodeTokens    int            `json:"decode_tokens"`
	Configs         []ConfigResult `json:"configs,omitempty"`
	Notes           []string       `json:"notes"`
	// Checkpoints is a matrix run's result, one entry per checkpoint
	// (Model, CheckpointBytes and Configs are then empty).
	Checkpoints []CheckpointResult `json:"checkpoints,omitempty"`
	// Rounds is the number of passes the repetitions were split over (0: one).
	Rounds int `json:"rounds,omitempty"`
	// BandwidthProbes are the read bandwidths in GB/s measured before each
	// checkpoint in every round of a run of two or more rounds.
	BandwidthProbes []float64 `json:"bandwidth_probes_gb_s,omitempty"`
}

// DefaultConfigs lists the configurations a run measures by default, given
// what is compiled in and available: cpu-<precision> for each precision of
// the CPU backend but "high" (float64 debugging, ask for cpu-high), "mlx"
// when the MLX backend is compiled in, "mlx_lm", and "llama.cpp".
func DefaultConfigs() []string {
	var out []string
	for _, p := range cpu.Precisions {
		if p != "" && p != "high" {
			out = append(out, "cpu-"+p)
		}
	}
	if slices.Contains(backend.Names(), "mlx") {
		out = append(out, "mlx")
	}
	return append(out, "mlx_lm", "llama.cpp")
}

// AllConfigs is DefaultConfigs plus cpu-high, cpu-fast-packed (fast with
// backend.Options.PackWeights, which is now fast's default: kept for
// scripts) and cpu-fast-unpacked (fast with NoPackWeights).
func AllConfigs() []string {
	return append(DefaultConfigs(), "cpu-high", "cpu-fast-packed", "cpu-fast-unpacked")
}

// ParseConfig maps a Go configuration name to its backend and options:
// "cpu-<precision>", "cpu-fast-packed", "cpu-fast-unpacked", "mlx",
// "mlx-cpu" or "mlx-gpu".
func ParseConfig(name string) (string, backend.Options, error) {
	switch {
	case name == "cpu-fast-packed":
		return "cpu", backend.Options{Precision: "fast", PackWeights: true}, nil
	case name == "cpu-fast-unpacked":
		return "cpu", backend.Options{Precision: "fast", NoPackWeights: true}, nil
	case strings.HasPrefix(name, "cpu-"):
		p := strings.TrimPrefix(name, "cpu-")
		if !slices.Contains(cpu.Precisions, p) {
			return "", backend.Options{}, fmt.Errorf("config %q: the cpu backend has no precision %q (it has %q)", name, p, cpu.Precisions)
		}
		return "cpu", backend.Options{Precision: p}, nil
	case name == "mlx", name == "mlx-cpu", name == "mlx-gpu":
		_, dev, _ := strings.Cut(name, "-")
		return "mlx", backend.Options{Device: dev}, nil
	}
	return "", backend.Options{}, fmt.Errorf("config %q is not a Go backend configuration (cpu-<precision>, mlx, mlx-cpu, mlx-gpu)", name)
}

// SelectConfigs expands a --configs selection (names or prefixes; empty:
// DefaultConfigs) into configuration names, or says which is unknown.
func SelectConfigs(sel []string) ([]string, error) { return selectConfigs(sel) }

// selectConfigs expands the --configs selection.
func selectConfigs(sel []string) ([]string, error) {
	if len(sel) == 0 {
		return DefaultConfigs(), nil
	}
	all := append(AllConfigs(), "mlx-cpu", "mlx-gpu")
	var out []string
	for _, s := range sel {
		n := 0
		for _, c := range all {
			if (c == s || strings.HasPrefix(c, s+"-") && s == "cpu") && !slices.Contains(out, c) {
				if s == "cpu" && (c == "cpu-high" || c == "cpu-fast-packed" || c == "cpu-fast-unpacked") {
					continue
				}
				out = append(out, c)
				n++
			}
		}
		if n == 0 && !slices.Contains(out, s) {
			return nil, fmt.Errorf("--configs: unknown configuration %q (known: %s; \"cpu\" selects every cpu-* but cpu-high, cpu-fast-packed and cpu-fast-unpacked)", s, strings.Join(all, ", "))
		}
	}
	return out, nil
}

func (o *Options) logf(format string, a ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, "bench: "+format+"\n", a...)
	}
}

// Run measures every selected configuration on every checkpoint and
// returns the result. A configuration that fails is reported with its
// error; Run fails only when nothing can be measured (bad options, a
// checkpoint it cannot read, no bandwidth measurement).
//
// With Checkpoints it is a matrix run (Result.Checkpoints); without, a
// run on Model and GGUF (Result.Model and Result.Configs). The memory
// bandwidth is measured once. The configurations of one checkpoint run
// back to back; with Rounds > 1 each one's repetitions are split over that
// many passes over the whole matrix, so that a change in the machine's
// load falls on every row alike.
func Run(o Options) (*Result, error) {
	configs, err := selectConfigs(o.Configs)
	if err != nil {
		return nil, err
	}
	if o.Reps < 1 || o.DecodeTokens < 3 || len(o.PromptLens) == 0 {
		return nil, fmt.Errorf("bench: reps %d, decode tokens %d, %d prompt lengths: want >= 1, >= 3, >= 1", o.Reps, o.DecodeTokens, len(o.PromptLens))
	}
	rounds := max(o.Rounds, 1)
	if rounds > o.Reps {
		return nil, fmt.Errorf("bench: %d rounds for %d reps: want at most one round per rep", rounds, o.Reps)
	}
	matrix := len(o.Checkpoints) > 0
	cks := o.Checkpoints
	if !matrix {
		cks = []Checkpoint{{Name: filepath.Base(o.Model), Model: o.Model, GGUF: o.GGUF}}
	}
	host, _ := os.Hostname()
	res := &Result{
		Date: time.Now().Format(time.RFC3339), Host: host, CPU: cpuModel(), Cores: runtime.NumCPU(),
		GoVersion: runtime.Version(), LoadAvgStart: loadAvg(),
		PromptLens: o.PromptLens, DecodeTokens: o.DecodeTokens,
	}
	if rounds > 1 {
		res.Rounds = rounds
	}

	tmp, err := os.MkdirTemp("", "mlxgo-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	maxLen := slices.Max(append(slices.Clone(o.PromptLens), o.SlowPromptLens...))
	type prepared struct {
		res     CheckpointResult
		goBytes int64
		idsFile string
		rows    []*ConfigResult // per configuration; nil until measured
	}
	preps := make([]*prepared, len(cks))
	for i, ck := range cks {
		what := ""
		if matrix {
			what = fmt.Sprintf("checkpoint %s (%s): ", ck.Name, ck.Model)
		}
		p := &prepared{res: CheckpointResult{Name: ck.Name, Model: ck.Model, GGUF: ck.GGUF}, rows: make([]*ConfigResult, len(configs))}
		if p.goBytes, p.res.CheckpointBytes, err = CheckpointWeightBytes(ck.Model); err != nil {
			return nil, fmt.Errorf("bench: %s%w", what, err)
		}
		if ck.GGUF != "" {
			if st, err := os.Stat(ck.GGUF); err == nil {
				p.res.GGUFBytes = st.Size()
			}
		}
		p.idsFile = filepath.Join(tmp, fmt.Sprintf("ids-%d.json", i))
		ids, err := PromptIDs(ck.Model, maxLen, o.Seed)
		if err != nil {
			return nil, fmt.Errorf("bench: %s%w", what, err)
		}
		if data, err := json.Marshal(ids); err != nil || os.WriteFile(p.idsFile, data, 0o644) != nil {
			return nil, fmt.Errorf("bench: writing %s: %v", p.idsFile, err)
		}
		preps[i] = p
	}

	// In a child: the parent must stay small, because a child's ru_maxrss
	// starts from the parent's resident set at the fork.
	o.logf("measuring memory read bandwidth (%d threads)", runtime.NumCPU())
	bw, err := o.bandwidth()
	if err != nil {
		return nil, err
	}
	res.BandwidthGBs = bw / 1e9
	res.BandwidthNote = fmt.Sprintf("streaming read of a 512 MiB buffer, %d goroutines, best of 5 passes (a prefetching reader and a plain Go loop)", runtime.NumCPU())

	mlxSlow := false
	if slices.ContainsFunc(configs, func(c string) bool { return strings.HasPrefix(c, "mlx") }) && o.Python != "" {
		dev, err := mlxDefaultDevice(o.Python)
		if err != nil {
			o.logf("could not ask MLX for its default device (%v); treating it as the CPU", err)
			dev = "cpu"
		}
		mlxSlow = strings.Contains(dev, "cpu")
	}
	slowNote := fmt.Sprintf("MLX's device is its CPU, whose quantized matmul is a scalar loop on x86 (about 1 tok/s or less at MiniCPM5-1B's size): "+
		"prompt lengths %v, %d decode tokens, %d rep(s), no warm-up", o.SlowPromptLens, o.SlowDecodeTokens, o.SlowReps)
	if slices.Contains(configs, "llama.cpp") && o.LlamaBench == "" {
		o.logf("llama.cpp skipped: no --llama-bench given")
	}
	if slices.Contains(configs, "mlx_lm") && o.Python == "" {
		o.logf("mlx_lm skipped: no python virtualenv (run make venv)")
	}

	for round := range rounds {
		reps := o.Reps/rounds + boolInt(round < o.Reps%rounds)
		for _, p := range preps {
			ck := &p.res
			// With rounds, the bandwidth again just before this
			// checkpoint's configurations: the machine's moves between
			// rounds, and each round's decode is set against its own.
			var bwRound float64
			if rounds > 1 {
				if b, err := o.bandwidth(); err != nil {
					o.logf("bandwidth before %s: %v", ck.Name, err)
				} else {
					bwRound = b / 1e9
					res.BandwidthProbes = append(res.BandwidthProbes, bwRound)
				}
			}
			for ci, name := range configs {
				plan := runPlan{lens: o.PromptLens, decode: o.DecodeTokens, reps: reps, warmup: o.Warmup}
				slow := mlxSlow && (name == "mlx_lm" || name == "mlx" || name == "mlx-cpu")
				if slow {
					if round > 0 {
						continue // a reduced run is one round
					}
					plan = runPlan{lens: o.SlowPromptLens, decode: o.SlowDecodeTokens, reps: o.SlowReps, warmup: 0}
				}
				if prev := p.rows[ci]; prev != nil && prev.Err != "" {
					continue // failed in an earlier round
				}
				var cr ConfigResult
				switch name {
				case "llama.cpp":
					if o.LlamaBench == "" || ck.GGUF == "" {
						continue
					}
				case "mlx_lm":
					if o.Python == "" {
						continue
					}
				default:
					if _, _, err := ParseConfig(name); err != nil {
						return nil, err
					}
				}
				where := name
				if matrix {
					where = ck.Name + " / " + name
				}
				if rounds > 1 && !slow {
					where += fmt.Sprintf(" (round %d/%d)", round+1, rounds)
				}
				o.logf("=== %s: prompt lengths %v, %d decode tokens, %d warm-up + %d reps", where, plan.lens, plan.decode, plan.warmup, plan.reps)
				switch name {
				case "llama.cpp":
					if len(plan.lens) > 0 {
						plan.depth = plan.lens[0] // mlxgo decodes after its first prompt
					}
					cr = o.runLlamaBench(ck.GGUF, plan)
				case "mlx_lm":
					cr = o.runChild(name, "mlx_lm", append([]string{o.Python, o.Driver, "--model", ck.Model}, plan.args(p.idsFile)...))
					cr.WeightBytesPerToken = p.goBytes
				default:
					cr = o.runChild(name, "mlxgo", append(append(slices.Clone(o.Self), "--config", name, "--model", ck.Model), plan.args(p.idsFile)...))
					cr.WeightBytesPerToken = ReadBytesPerToken(p.goBytes, cr.PackedBytes, cr.ReleasedBytes)
				}
				cr.Name, cr.Reps, cr.Warmup, cr.DecodeTokens, cr.Rounds = name, plan.reps, plan.warmup, plan.decode, 1
				cr.markRound()
				if bwRound > 0 && !slow {
					cr.BandwidthRounds = []float64{bwRound}
				}
				if slow {
					cr.Note = "MLX CPU device: reduced run"
				}
				if cr.Err != "" {
					o.logf("%s failed: %s", where, cr.Err)
				}
				if p.rows[ci] == nil {
					p.rows[ci] = &cr
				} else {
					*p.rows[ci] = mergeRound(*p.rows[ci], cr)
				}
			}
		}
	}

	for i, p := range preps {
		for _, cr := range p.rows {
			if cr == nil {
				continue
			}
			cr.BandwidthFraction = cr.bandwidthFraction(bw)
			p.res.Configs = append(p.res.Configs, *cr)
		}
		switch llama := p.res.find("llama.cpp"); {
		case llama != nil:
		case !slices.Contains(configs, "llama.cpp"):
			p.res.NoLlama = "llama.cpp was not selected (--configs)"
		case o.LlamaBench == "":
			p.res.NoLlama = "no llama-bench was given (--llama-bench)"
		case p.res.GGUF == "":
			p.res.NoLlama = cmp.Or(cks[i].NoGGUF, "the checkpoint has no GGUF twin")
		default:
			p.res.NoLlama = "llama.cpp failed (see its row)"
		}
	}
	if matrix {
		for _, p := range preps {
			res.Checkpoints = append(res.Checkpoints, p.res)
		}
	} else {
		p := preps[0]
		res.Model, res.CheckpointBytes, res.Configs = p.res.Model, p.res.CheckpointBytes, p.res.Configs
	}
	if mlxSlow {
		res.Notes = append(res.Notes, slowNote)
	}
	res.LoadAvgEnd = loadAvg()
	return res, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ReadBytesPerToken is what one decode step reads of a Go configuration's
// weights: the checkpoint's perToken bytes (CheckpointWeightBytes), less
// the mapped pages its packed matrices replaced and gave back (released),
// plus the packed form (packed). The released pages are the packed
// matrices' codes, scales and biases, rounded out to whole pages, and
// never more than perToken here (a tied embedding also serves one row a
// token from its file pages, read again: less than a page).
func ReadBytesPerToken(perToken, packed, released int64) int64 {
	if packed <= 0 {
		return perToken
	}
	return max(0, perToken-min(released, perToken)) + packed
}

// mergeRound adds round b's measurements of a configuration to those of the
// earlier rounds a: the samples of each statistic together, the peaks'
// maximum, the load times' mean. An error in either is the result.
func mergeRound(a, b ConfigResult) ConfigResult {
	if a.Err != "" {
		return a
	}
	if b.Err != "" {
		return b
	}
	out := a
	out.Reps += b.Reps
	out.LoadS = (a.LoadS*float64(a.Rounds) + b.LoadS*float64(b.Rounds)) / float64(a.Rounds+b.Rounds)
	out.Rounds += b.Rounds
	out.PeakRSSBytes = max(a.PeakRSSBytes, b.PeakRSSBytes)
	out.DecodePeakRSSBytes = max(a.DecodePeakRSSBytes, b.DecodePeakRSSBytes)
	join := func(x, y Stat) Stat { return NewStat(append(slices.Clone(x.Samples), y.Samples...)) }
	out.TTFT, out.Decode = join(a.TTFT, b.TTFT), join(a.Decode, b.Decode)
	out.DecodeRounds = append(slices.Clone(a.DecodeRounds), b.DecodeRounds...)
	out.BandwidthRounds = append(slices.Clone(a.BandwidthRounds), b.BandwidthRounds...)
	out.Prompts = slices.Clone(a.Prompts)
	for _, q := range b.Prompts {
		i := slices.IndexFunc(out.Prompts, func(p PromptResult) bool { return p.Prompt == q.Prompt })
		if i < 0 {
			out.Prompts = append(out.Prompts, q)
			continue
		}
		out.Prompts[i].PrefillTPS = join(out.Prompts[i].PrefillTPS, q.PrefillTPS)
		out.Prompts[i].Rounds = append(slices.Clone(out.Prompts[i].Rounds), q.Rounds...)
	}
	return out
}

type runPlan struct {
	lens                 []int
	decode, reps, warmup int
	depth                int // llama.cpp only: the context its decode runs at (0: empty)
}

func (p runPlan) args(idsFile string) []string {
	lens := make([]string, len(p.lens))
	for i, l := range p.lens {
		lens[i] = strconv.Itoa(l)
	}
	return []string{"--ids-file", idsFile, "--prompt-lens", strings.Join(lens, ","),
		"--decode-tokens", strconv.Itoa(p.decode), "--reps", strconv.Itoa(p.reps), "--warmup", strconv.Itoa(p.warmup)}
}

// runChild runs one configuration's child process and summarises its report.
func (o *Options) runChild(name, engine string, argv []string) ConfigResult {
	cr := ConfigResult{Engine: engine}
	rep, peak, err := runReport(name, o.Progress, argv)
	cr.PeakRSSBytes = peak
	if err != nil {
		cr.Err = err.Error()
		return cr
	}
	cr.Device, cr.LoadS, cr.DecodePeakRSSBytes = rep.Device, rep.LoadS, rep.DecodePeakRSSBytes
	cr.PeakRSSBytes = max(cr.PeakRSSBytes, rep.PrefillPeakRSSBytes) // the child's reset lowered ru_maxrss
	cr.PackedBytes, cr.ReleasedBytes = rep.PackedBytes, rep.ReleasedBytes
	cr.Prompts, cr.TTFT, cr.TTFTPrompt, cr.Decode = summarise(rep.Runs)
	return cr
}

// runReport runs a child process, its stderr to progress, and reads the
// ChildReport on the last line of its stdout; peak is the child's peak
// resident set (ru_maxrss).
func runReport(name string, progress io.Writer, argv []string) (rep ChildReport, peak int64, err error) {
	var stdout bytes.Buffer
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &stdout, progress
	if progress == nil {
		cmd.Stderr = io.Discard
	}
	err = cmd.Run()
	peak = maxRSS(cmd.ProcessState)
	if err != nil {
		return rep, peak, fmt.Errorf("%s: %v", strings.Join(argv, " "), err)
	}
	if err := json.Unmarshal(lastLine(stdout.Bytes()), &rep); err != nil {
		return rep, peak, fmt.Errorf("%s: its output is not a report: %v", name, err)
	}
	return rep, peak, nil
}

func lastLine(b []byte) []byte {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		return b[i+1:]
	}
	return b
}

// mlxDefaultDevice asks the virtualenv's MLX for its default device.
func mlxDefaultDevice(python string) (string, error) {
	out, err := exec.Command(python, "-c", "import mlx.core as mx; print(mx.default_device())").Output()
	return strings.ToLower(strings.TrimSpace(string(out))), err
}

// loadAvg returns /proc/loadavg's first three fields ("" where absent).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// cpuModel returns /proc/cpuinfo's model name and its AVX-512 / VNNI flags.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	var model string
	var feats []string
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch strings.TrimSpace(k) {
		case "model name":
			if model == "" {
				model = strings.TrimSpace(v)
			}
		case "flags":
			if feats == nil {
				fl := strings.Fields(v)
				for _, f := range []string{"avx2", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni"} {
					if slices.Contains(fl, f) {
						feats = append(feats, f)
					}
				}
				feats = append(feats, "")
			}
		}
	}
	return strings.TrimSpace(model + " " + strings.Join(feats, " "))
}

// bandwidth runs ReadBandwidth in a child process (Self with --bandwidth).
func (o *Options) bandwidth() (float64, error) {
	argv := append(slices.Clone(o.Self), "--bandwidth")
	out, err := exec.Command(argv[0], argv[1:]...).Output()
	if err != nil {
		return 0, fmt.Errorf("bench: bandwidth child %s: %v", strings.Join(argv, " "), err)
	}
	var r struct {
		BytesPerSecond float64 `json:"bytes_per_s"`
	}
	if err := json.Unmarshal(lastLine(out), &r); err != nil || r.BytesPerSecond <= 0 {
		return 0, fmt.Errorf("bench: bandwidth child printed %q, want {\"bytes_per_s\": N}", out)
	}
	return r.BytesPerSecond, nil
}

// BandwidthChild measures ReadBandwidth on every core (512 MiB, best of 5
// passes) and prints {"bytes_per_s": N}.
func BandwidthChild(stdout io.Writer) error {
	return json.NewEncoder(stdout).Encode(map[string]float64{"bytes_per_s": ReadBandwidth(runtime.NumCPU(), 512<<20, 5)})
}
