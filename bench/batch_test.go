package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A batch sweep's child on the tiny fixture: one timed run per batch size,
// each with every row's decode-step tokens counted, and the table the
// harness renders from it.
func TestRunBatchChild(t *testing.T) {
	ids, err := PromptIDs(fixture, 8, 1)
	if err != nil {
		t.Fatal(err)
	}
	var out, log bytes.Buffer
	err = RunBatchChild(ChildOptions{Model: fixture, Backend: "cpu", IDs: ids, PromptLens: []int{5}, DecodeTokens: 4, Reps: 1}, []int{1, 3}, &out, &log)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var rep ChildReport
	if err := json.Unmarshal(lastLine(out.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	pts := summariseBatch(rep.Runs, []int{1, 3})
	// max_tokens 4 per row: the first token comes out of the prompt step's
	// logits in the first decode step, so every token is a decode step's.
	for i, want := range []int{4, 12} {
		if p := pts[i]; p.Tokens != want || p.DecodeTPS.N != 1 || p.DecodeTPS.Median <= 0 || p.PromptTPS.N != 1 {
			t.Errorf("batch %d: got %+v, want %d tokens and one positive rate", p.Batch, p, want)
		}
	}
	err = RunBatchChild(ChildOptions{Model: fixture, Backend: "cpu", IDs: ids, PromptLens: []int{5}, DecodeTokens: 4, Reps: 1}, []int{5}, &out, &log)
	if err == nil || !strings.Contains(err.Error(), "needs 9 ids, have 8") {
		t.Errorf("batch 5 of 5-token prompts from 8 ids: got %v, want an error naming the ids needed", err)
	}
	res := &BatchSweepResult{BatchSizes: []int{1, 3}, Configs: []BatchConfigResult{
		{Name: "cpu-fast", Engine: "mlxgo", Points: []BatchPoint{{Batch: 1, DecodeTPS: NewStat([]float64{10})}, {Batch: 3, DecodeTPS: NewStat([]float64{25})}}},
		{Name: "llama.cpp", Engine: "llama.cpp", Points: []BatchPoint{{Batch: 1, DecodeTPS: NewStat([]float64{20})}, {Batch: 3, DecodeTPS: NewStat([]float64{50})}}},
	}}
	md := res.Markdown()
	for _, want := range []string{"| cpu-fast | 10.0 (n=1) | 25.0 (n=1) | 2.50× |", "| cpu-fast | 0.50× | 0.50× |"} {
		if !strings.Contains(md, want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
}

// A stand-in llama-batched-bench prints its jsonl lines (after a header
// line that is not JSON); the harness turns S_TG into aggregate decode
// rates per batch size over the repetitions.
func TestLlamaBatchedBench(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "llama-batched-bench")
	canned := `main: n_kv_max = 384
{"n_kv_max": 384, "pp": 16, "tg": 32, "pl": 1, "n_kv": 48, "t_pp": 0.5, "speed_pp": 32, "t_tg": 1.0, "speed_tg": 32, "t": 1.5, "speed": 32}
{"n_kv_max": 384, "pp": 16, "tg": 32, "pl": 4, "n_kv": 192, "t_pp": 1.0, "speed_pp": 64, "t_tg": 2.0, "speed_tg": 64, "t": 3, "speed": 64}`
	if err := os.WriteFile(script, []byte("#!/bin/sh\ncat <<'EOF'\n"+canned+"\nEOF\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := &BatchSweepOptions{LlamaBatchedBench: script, GGUF: "x.gguf", BatchSizes: []int{1, 4}, PromptLen: 16, DecodeTokens: 32, Reps: 2, Warmup: 1, Threads: 2}
	cr := o.runLlamaBatched()
	if cr.Err != "" {
		t.Fatal(cr.Err)
	}
	if p := cr.point(1); p == nil || p.DecodeTPS.Median != 32 || p.DecodeTPS.N != 2 || p.PromptTPS.Median != 32 {
		t.Errorf("batch 1: got %+v, want decode 32 tok/s (n=2, the warm-up dropped), prompt 32", p)
	}
	if p := cr.point(4); p == nil || p.DecodeTPS.Median != 64 || p.Tokens != 128 {
		t.Errorf("batch 4: got %+v, want 4·32/2 = 64 tok/s over 128 tokens", p)
	}
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho '{not json'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if cr := o.runLlamaBatched(); !strings.Contains(cr.Err, "not its JSON") {
		t.Errorf("bad output: got error %q, want one saying it is not llama-batched-bench's JSON", cr.Err)
	}
}
