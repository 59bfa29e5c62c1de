package conformance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
)

// TestFastPrecision holds the CPU backend's "fast" precision (int8
// activations in every quantized matmul) to the oracle's float32 decode
// cases by the table's "fast_logits" row: teacher-forced next-token
// distributions close in KL, the argmax equal wherever the oracle's margin
// is clear. Tokens are not compared on their own: the argmax criterion on
// the logits is the check, and below its margin fast may decide otherwise.
func TestFastPrecision(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{Precision: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	classes := map[string]string{"model_logits": "fast_logits", "model_tokens": conformance.InfoClass}
	n := 0
	for _, c := range modelCases(t) {
		if c.Op != "decode" || c.DType != "float32" {
			continue
		}
		n++
		t.Run(c.Name, func(t *testing.T) {
			for _, r := range conformance.CheckAs(b, c, classes) {
				if r.Metric != "kl_max" || !r.Pass {
					t.Error(r.String())
					continue
				}
				t.Log(r.String())
			}
		})
	}
	if n == 0 {
		t.Fatal("no float32 decode cases in testdata")
	}
}

// TestUnquantizedTokens holds the greedy and decode tokens of the bfloat16
// checkpoints without quantization to the table's
// "model_tokens_unquantized" row (every token, including those the fixture's
// model_tokens row leaves unchecked because the oracle's margin there is
// within its own noise), on every backend compiled in.
func TestUnquantizedTokens(t *testing.T) {
	classes := map[string]string{"model_tokens": "model_tokens_unquantized"}
	var cases []*conformance.Case
	for _, c := range modelCases(t) {
		if (c.Op == "greedy" || c.Op == "decode") && c.DType == "bfloat16" && !quantized(t, c.CheckpointDir()) {
			cases = append(cases, c)
		}
	}
	if len(cases) == 0 {
		t.Fatal("no greedy or decode cases of an unquantized bfloat16 checkpoint in testdata")
	}
	for _, name := range backend.Names() {
		t.Run(name, func(t *testing.T) {
			b, err := backend.Open(name, backend.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, c := range cases {
				for _, r := range conformance.CheckAs(b, c, classes) {
					if r.Output != "tokens" {
						continue // logits and logprobs: TestFixtures
					}
					if !r.Pass || r.Metric != "mismatches" {
						t.Error(r.String())
						continue
					}
					t.Log(r.String())
				}
			}
		})
	}
}

// quantized reports whether the checkpoint in dir has a quantization entry
// in its config.json.
func quantized(t *testing.T, dir string) bool {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	_, ok := cfg["quantization"]
	return ok
}
