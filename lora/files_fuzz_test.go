package lora

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/internal/testenv"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// snapshot returns a function that puts back every projection of m as it
// is now (undoing Apply or Load) and releases the adapters' arrays.
func snapshot(b backend.Backend, m *minicpm5.Model) func() {
	var slots []*nn.Linear
	var was []nn.Linear
	for _, blk := range m.Layers {
		for _, k := range Keys {
			s := Projection(blk, k)
			slots, was = append(slots, s), append(was, *s)
		}
	}
	return func() {
		for i, s := range slots {
			if *s != was[i] {
				for _, p := range (Adapter{Layer: *s}).Params() {
					b.Release(*p.Array)
				}
				*s = was[i]
			}
		}
	}
}

// adapterSeeds are adapter directories (config, weights) that mlxgo
// writes as mlx_lm does (the same files TestInteropMLXLM has mlx_lm
// read), and malformed ones: another rank, layer set or fine-tune type,
// bad configs, truncated or foreign safetensors.
func adapterSeeds(t testing.TB, b backend.Backend, m *minicpm5.Model) [][2][]byte {
	var seeds [][2][]byte
	write := func(cfg Config, dora bool) [2][]byte {
		undo := snapshot(b, m)
		defer undo()
		var ads []Adapter
		var err error
		if dora {
			ads, err = ApplyDoRA(b, m, cfg.NumLayers, cfg.LoRA, generate.NewRNG(3))
		} else {
			ads, err = Apply(b, m, cfg.NumLayers, cfg.LoRA, generate.NewRNG(3))
		}
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := Save(b, dir, ads, cfg, map[string]any{"model": "optiq-f32", "seed": 3}); err != nil {
			t.Fatal(err)
		}
		c, err := os.ReadFile(filepath.Join(dir, ConfigFile))
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(filepath.Join(dir, WeightsFile))
		if err != nil {
			t.Fatal(err)
		}
		return [2][]byte{c, w}
	}
	lora1 := write(Config{NumLayers: 1, LoRA: Params{Rank: 2, Scale: 5}}, false)
	all := write(Config{NumLayers: -1, LoRA: Params{Rank: 1, Scale: 20, Keys: []string{"self_attn.q_proj", "mlp.down_proj"}}}, false)
	dora := write(Config{FineTuneType: "dora", NumLayers: 1, LoRA: Params{Rank: 2, Scale: 5, Dropout: 0.1}}, true)
	seeds = append(seeds, lora1, all, dora,
		[2][]byte{lora1[0], lora1[1][:len(lora1[1])/2]},
		[2][]byte{lora1[0], all[1]},
		[2][]byte{dora[0], lora1[1]},
		[2][]byte{lora1[0], dora[1]},
	)
	for _, cfg := range []string{
		`{"num_layers": 1, "lora_parameters": {"rank": 8, "scale": 5}}`,
		`{"num_layers": 1, "lora_parameters": {"rank": 0, "scale": 5}}`,
		`{"num_layers": 1, "lora_parameters": {"rank": -2, "scale": 5}}`,
		`{"num_layers": 1, "lora_parameters": {"rank": 1000000000, "scale": 5}}`,
		`{"num_layers": 1000000000, "lora_parameters": {"rank": 2, "scale": 5}}`,
		`{"num_layers": -1000000000, "lora_parameters": {"rank": 2, "scale": 5}}`,
		`{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 1e308, "dropout": -1}}`,
		`{"num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5, "keys": ["lm_head", ""]}}`,
		`{"fine_tune_type": "full", "num_layers": 1, "lora_parameters": {"rank": 2, "scale": 5}}`,
		`{"num_layers": 1, "lora_parameters": null}`,
		`{"num_layers": "1", "lora_parameters": {}}`,
		`[]`, `null`, ``,
	} {
		seeds = append(seeds, [2][]byte{[]byte(cfg), lora1[1]})
	}
	hdr := func(h string) []byte { return append(binary.LittleEndian.AppendUint64(nil, uint64(len(h))), h...) }
	seeds = append(seeds,
		[2][]byte{lora1[0], hdr(`{"model.layers.2.mlp.up_proj.lora_a": {"dtype": "F16", "shape": [128, 2], "data_offsets": [0, 512]}}` + strings.Repeat("\x00", 512))},
		[2][]byte{lora1[0], hdr(`{"model.layers.2.mlp.up_proj.lora_a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 0]}}`)},
		[2][]byte{lora1[0], append(binary.LittleEndian.AppendUint64(nil, 1<<62), '{')},
	)
	return seeds
}

// FuzzLoad: any adapter directory (adapter_config.json and
// adapters.safetensors) either fails with an error naming one of the two
// files, or loads adapters that run (the logits of two tokens are
// computed); nothing panics, and no size from the files is allocated
// before the file is known to hold it. The weights are also fed to
// LoadWeights (--resume-adapter-file), which must fail naming the file or
// set only adapters of their shape.
func FuzzLoad(f *testing.F) {
	testenv.Need(f, filepath.Join(checkpointDir(f), "config.json"), "the oracle's tiny checkpoints; run `make oracle`")
	b, err := cpu.New(backend.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { b.Close() })
	m, err := minicpm5.Load(b, checkpointDir(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { m.Close() })
	seeds := adapterSeeds(f, b, m)
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	// The well-formed seeds load (so the target reaches the forward pass).
	for i, s := range seeds[:3] {
		dir := f.TempDir()
		os.WriteFile(filepath.Join(dir, ConfigFile), s[0], 0o644)
		os.WriteFile(filepath.Join(dir, WeightsFile), s[1], 0o644)
		undo := snapshot(b, m)
		if _, _, err := Load(b, m, dir); err != nil {
			f.Fatalf("seed %d: %v", i, err)
		}
		undo()
	}
	f.Fuzz(func(t *testing.T, cfg, weights []byte) {
		dir := t.TempDir()
		cfgPath, wPath := filepath.Join(dir, ConfigFile), filepath.Join(dir, WeightsFile)
		if err := os.WriteFile(cfgPath, cfg, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(wPath, weights, 0o644); err != nil {
			t.Fatal(err)
		}
		undo := snapshot(b, m)
		defer undo()
		ads, _, err := Load(b, m, dir)
		if err != nil {
			if !strings.Contains(err.Error(), cfgPath) && !strings.Contains(err.Error(), wPath) {
				t.Fatalf("error %q names neither file", err)
			}
		} else {
			if len(ads) == 0 {
				t.Fatal("loaded no adapters without an error")
			}
			out, err := m.Forward(b.FromHost(tensor.FromInt32(tensor.Shape{1, 2}, []int32{1, 2})), nil, minicpm5.ForwardOptions{})
			if err != nil {
				t.Fatalf("loaded adapters do not run: %v", err)
			}
			if _, err := b.ToHost(out.Logits); err != nil {
				t.Fatalf("loaded adapters do not run: %v", err)
			}
			b.Release(out.Logits)
		}
		undo()
		ads, err = Apply(b, m, 1, Params{Rank: 2, Scale: 5}, generate.NewRNG(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := LoadWeights(b, wPath, ads); err != nil && !strings.Contains(err.Error(), wPath) {
			t.Fatalf("LoadWeights: error %q does not name the file", err)
		}
		for _, a := range ads {
			for _, p := range a.Params() {
				if s := (*p.Array).Shape(); len(s) != 2 {
					t.Fatalf("%s.%s has shape %v after LoadWeights", a.Path, p.Leaf, s)
				}
			}
		}
	})
}
