package train

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/internal/testenv"
)

// batchOracle runs mlx_lm's iterate_batches over a CacheDataset of the
// given records after np.random.seed: a looping iterator and, between
// its batches, a whole non-looping one (as validation interleaves with
// training), printing every batch and its lengths.
const batchOracle = `
import json, sys
import numpy as np
from mlx_lm.tuner.datasets import CacheDataset
from mlx_lm.tuner.trainer import iterate_batches
a = json.loads(sys.argv[1])
class DS:
    def __init__(self, recs): self.recs = recs
    def __getitem__(self, i): return {str(k): 0 for k in range(self.recs[i]["fields"])}
    def __len__(self): return len(self.recs)
    def process(self, d): raise RuntimeError("unused")
recs = a["recs"]
ds = CacheDataset(DS(recs))
ds._proc_data = [(r["tokens"], r["offset"]) for r in recs]
np.random.seed(a["seed"])
out = []
it = iterate_batches(ds, a["batch"], a["max_seq"], loop=True)
for k in range(a["steps"]):
    b, l = next(it)
    out.append({"tokens": np.array(b).tolist(), "lengths": np.array(l).tolist()})
    if k % 3 == 0:
        for b, l in iterate_batches(ds, a["batch"], a["max_seq"]):
            out.append({"tokens": np.array(b).tolist(), "lengths": np.array(l).tolist()})
print(json.dumps(out))
`

// TestBatchesMatchMLXLM: the batches (order, padding, truncation,
// lengths) of iterate_batches, over several epochs with a second
// iterator drawing from the same numpy generator between them.
func TestBatchesMatchMLXLM(t *testing.T) {
	py := testenv.Python(t)
	var set []Example
	var recs []map[string]any
	for i := 0; i < 11; i++ {
		n := 1 + (i*37)%70
		toks := make([]int32, n)
		for k := range toks {
			toks[k] = int32(1 + (i*131+k*7)%900)
		}
		ex := Example{Tokens: toks, Offset: i % 4, Fields: 1 + i%3, Source: fmt.Sprintf("x.jsonl:%d", i+1)}
		set = append(set, ex)
		recs = append(recs, map[string]any{"tokens": toks, "offset": ex.Offset, "fields": ex.Fields})
	}
	for _, c := range []struct{ batch, maxSeq, seed, steps int }{{3, 40, 0, 8}, {2, 2048, 7, 9}, {4, 33, 123, 5}} {
		t.Run(fmt.Sprintf("b%d/max%d/seed%d", c.batch, c.maxSeq, c.seed), func(t *testing.T) {
			arg, _ := json.Marshal(map[string]any{"recs": recs, "batch": c.batch, "max_seq": c.maxSeq, "seed": c.seed, "steps": c.steps})
			out, err := exec.Command(py, "-c", batchOracle, string(arg)).Output()
			if err != nil {
				if ee, ok := err.(*exec.ExitError); ok {
					t.Fatalf("oracle: %v\n%s", err, ee.Stderr)
				}
				t.Fatal(err)
			}
			var want []struct {
				Tokens  [][]int32  `json:"tokens"`
				Lengths [][2]int32 `json:"lengths"`
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n") // mlx_lm's warnings come first
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &want); err != nil {
				t.Fatal(err)
			}
			if c.maxSeq < 70 && !strings.Contains(string(out), "will be truncated to") {
				t.Errorf("mlx_lm printed no truncation warning: the case truncates nothing")
			}
			rng := NewNumpyRNG(uint32(c.seed))
			var warn bytes.Buffer
			it, err := NewBatches(set, c.batch, c.maxSeq, true, rng, &warn)
			if err != nil {
				t.Fatal(err)
			}
			var got []Batch
			for k := 0; k < c.steps; k++ {
				b, ok := it.Next()
				if !ok {
					t.Fatal("looping iterator ended")
				}
				got = append(got, b)
				if k%3 == 0 {
					val, err := NewBatches(set, c.batch, c.maxSeq, false, rng, nil)
					if err != nil {
						t.Fatal(err)
					}
					for b, ok := val.Next(); ok; b, ok = val.Next() {
						got = append(got, b)
					}
				}
			}
			if len(got) != len(want) {
				t.Fatalf("%d batches, mlx_lm %d", len(got), len(want))
			}
			for i, w := range want {
				g := got[i]
				rows := make([][]int32, g.B)
				for r := range rows {
					rows[r] = g.Tokens[r*g.L : (r+1)*g.L]
				}
				if fmt.Sprint(rows) != fmt.Sprint(w.Tokens) || fmt.Sprint(g.Lengths) != fmt.Sprint(w.Lengths) {
					t.Fatalf("batch %d: %v %v, mlx_lm %v %v", i, rows, g.Lengths, w.Tokens, w.Lengths)
				}
			}
			if c.maxSeq < 70 && !strings.Contains(warn.String(), "will be truncated to") {
				t.Errorf("no truncation warning: %q", warn.String())
			}
		})
	}
}

func TestBatchesErrors(t *testing.T) {
	set := []Example{{Tokens: []int32{1, 2}}}
	if _, err := NewBatches(set, 2, 10, false, NewNumpyRNG(0), nil); err == nil || !strings.Contains(err.Error(), "at least batch_size=2") {
		t.Errorf("got %v", err)
	}
	if _, err := NewBatches(set, 0, 10, false, NewNumpyRNG(0), nil); err == nil {
		t.Error("batch size 0 accepted")
	}
}
