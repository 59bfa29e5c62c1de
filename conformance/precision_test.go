package conformance_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/conformance"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestFastPrecision holds the CPU backend's "fast" precision (int8
// activations in every quantized matmul) to the oracle's float32 decode
// cases by the table's "fast_logits" row: teacher-forced next-token
// distributions close in KL, the argmax equal wherever the oracle's margin
// is clear. Tokens are not compared on their own: the argmax criterion on
// the logits is the check, and below its margin fast may decide otherwise.
// The cases of the full cache run again with the float32 keys and values
// kept in bfloat16 (what mlxgo's commands keep in the fast precision,
// --kv-dtype auto) and in float16 (--kv-dtype float16), held to the same
// row: a rounding of each key and value to 8 or 11 bits, inside the int8
// activations' 2^-8.
func TestFastPrecision(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{Precision: "fast"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	classes := map[string]string{"model_logits": "fast_logits", "model_tokens": conformance.InfoClass}
	n, full := 0, 0
	for _, c := range modelCases(t) {
		if c.Op != "decode" || c.DType != "float32" {
			continue
		}
		n++
		runs := []struct {
			name string
			c    *conformance.Case
		}{{"", c}}
		if _, rot := c.Params["max_kv_size"]; !rot {
			if _, q := c.Params["kv_bits"]; !q {
				full++
				runs = append(runs, struct {
					name string
					c    *conformance.Case
				}{"/kv-bfloat16", conformance.WithKVDType(c, tensor.BF16)}, struct {
					name string
					c    *conformance.Case
				}{"/kv-float16", conformance.WithKVDType(c, tensor.F16)})
			}
		}
		for _, r := range runs {
			t.Run(c.Name+r.name, func(t *testing.T) {
				for _, res := range conformance.CheckAs(b, r.c, classes) {
					if res.Metric != "kl_max" || !res.Pass {
						t.Error(res.String())
						continue
					}
					t.Log(res.String())
				}
			})
		}
	}
	if n == 0 || full == 0 {
		t.Fatalf("%d float32 decode cases in testdata, %d of the full cache: want some of each", n, full)
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
