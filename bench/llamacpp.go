package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
)

// llamaBenchEntry is the part of one llama-bench JSON result the harness
// reads (llama-bench -o json prints an array of them).
type llamaBenchEntry struct {
	ModelSize int64     `json:"model_size"`
	NPrompt   int       `json:"n_prompt"`
	NGen      int       `json:"n_gen"`
	AvgTS     float64   `json:"avg_ts"`
	SamplesTS []float64 `json:"samples_ts"`
	CPUInfo   string    `json:"cpu_info"`
	Build     string    `json:"build_commit"`
}

// runLlamaBench runs llama-bench on the GGUF twin gguf: ppP for each prompt
// length and tgN for the decode tokens, with the plan's repetitions
// (llama-bench does its own warm-up run). With p.depth > 0 the decode runs
// in a second invocation at that depth (-d: the context mlxgo's decode
// starts from, after its first prompt), the prompts in the first from an
// empty cache, as mlxgo's prefill runs.
func (o *Options) runLlamaBench(gguf string, p runPlan) ConfigResult {
	cr := ConfigResult{Engine: "llama.cpp", Device: "cpu"}
	threads := o.Threads
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	lens := make([]string, len(p.lens))
	for i, l := range p.lens {
		lens[i] = strconv.Itoa(l)
	}
	base := []string{o.LlamaBench, "-m", gguf, "-t", strconv.Itoa(threads), "-r", strconv.Itoa(p.reps), "-o", "json"}
	runs := [][]string{append(slices.Clone(base), "-p", strings.Join(lens, ","), "-n", strconv.Itoa(p.decode))}
	if p.depth > 0 {
		runs = [][]string{
			append(slices.Clone(base), "-p", strings.Join(lens, ","), "-n", "0"),
			append(slices.Clone(base), "-p", "0", "-n", strconv.Itoa(p.decode), "-d", strconv.Itoa(p.depth)),
		}
	}
	w, err := GGUFWeightBytes(gguf)
	if err != nil {
		cr.Err = err.Error()
		return cr
	}
	cr.WeightBytesPerToken = w
	for i, argv := range runs {
		var stdout bytes.Buffer
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Stdout = &stdout
		cmd.Stderr = o.Progress
		o.logf("running %s", strings.Join(argv, " "))
		err := cmd.Run()
		cr.PeakRSSBytes = max(cr.PeakRSSBytes, maxRSS(cmd.ProcessState))
		if err != nil {
			cr.Err = fmt.Sprintf("%s: %v", strings.Join(argv, " "), err)
			return cr
		}
		var entries []llamaBenchEntry
		if err := json.Unmarshal(stdout.Bytes(), &entries); err != nil {
			cr.Err = fmt.Sprintf("llama-bench output is not its JSON: %v", err)
			return cr
		}
		prompts, decode := i == 0, i == len(runs)-1 // what this invocation measured
		for _, e := range entries {
			samples := e.SamplesTS
			if len(samples) == 0 {
				samples = []float64{e.AvgTS} // older llama-bench: the mean only
			}
			cr.Device = "cpu " + strconv.Itoa(threads) + " threads"
			switch {
			case prompts && e.NPrompt > 0 && e.NGen == 0:
				cr.Prompts = append(cr.Prompts, PromptResult{Prompt: e.NPrompt, PrefillTPS: NewStat(samples)})
			case decode && e.NGen > 0 && e.NPrompt == 0:
				cr.Decode = NewStat(samples)
			}
		}
	}
	cr.Note = "llama-bench runs its own warm-up; ppP: prompt processing alone; tgN: decode from an empty context; no load time or TTFT reported"
	if p.depth > 0 {
		cr.Note = fmt.Sprintf("llama-bench runs its own warm-up; ppP: prompt processing alone; tgN: decode from a context of %d tokens (-d %d, "+
			"where mlxgo's decode starts: after its first prompt); no load time or TTFT reported", p.depth, p.depth)
	}
	return cr
}
