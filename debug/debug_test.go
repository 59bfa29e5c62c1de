package debug

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

const models = "../conformance/testdata/models"

// fixture returns a fixture checkpoint directory and its oracle tap dump,
// failing when the dump is missing (fixtures are committed; regenerate with
// conformance/oracle/generate.py).
func fixture(t *testing.T, name string) (dir, dump string) {
	t.Helper()
	dir = filepath.Join(models, name)
	dump = filepath.Join(dir, TapsFile)
	if _, err := os.Stat(dump); err != nil {
		t.Fatalf("oracle tap dump missing: %v (run .venv/bin/python conformance/oracle/generate.py --out conformance/testdata)", err)
	}
	return dir, dump
}

func TestTapNames(t *testing.T) {
	names := TapNames(3)
	if got, want := len(names), 1+3*13+2; got != want {
		t.Fatalf("TapNames(3): got %d names, want %d", got, want)
	}
	for k, n := range names {
		layer, suffix, ok := ParseTap(n)
		if !ok {
			t.Fatalf("ParseTap(%q) not ok (index %d)", n, k)
		}
		if layer >= 0 && LayerTap(layer, suffix) != n {
			t.Errorf("LayerTap(ParseTap(%q)) = %q", n, LayerTap(layer, suffix))
		}
		if _, err := Steps(n); err != nil {
			t.Errorf("Steps(%q): %v", n, err)
		}
	}
	for _, bad := range []string{"", "layers.x.q", "layers.1.qq", "layers.-1.q", "layers.01.q", "layers.1", "logit"} {
		if _, _, ok := ParseTap(bad); ok {
			t.Errorf("ParseTap(%q): got ok, want a rejection", bad)
		}
	}
	shuffled := slices.Clone(names)
	slices.Reverse(shuffled)
	if got := orderTaps(append(shuffled, "zz.extra")); !slices.Equal(got, append(names, "zz.extra")) {
		t.Errorf("orderTaps: got %v, want graph order then extras", got)
	}
}

// record runs the cpu backend on a checkpoint and returns its taps.
func record(t *testing.T, dir string, ids []int32, s Side) *Dump {
	t.Helper()
	e, err := OpenEngine(s, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	d, err := e.Record(ids, filepath.Base(dir))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTapsMatchForward: recording taps does not change the forward pass, the
// recorded block outputs are Forward's hidden states, and a dump survives a
// write and a read.
func TestTapsMatchForward(t *testing.T) {
	dir, _ := fixture(t, "optiq-bf16")
	ids := []int32{5, 900, 17, 3, 3, 250, 1}
	d := record(t, dir, ids, Side{Backend: "cpu"})
	if got, want := d.Names, TapNames(3); !slices.Equal(got, want) {
		t.Fatalf("recorded taps: got %v, want %v", got, want)
	}

	b, _ := cpu.New(backend.Options{})
	defer b.Close()
	m, err := minicpm5.Load(b, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	x := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(ids)}, ids))
	out, err := m.Forward(x, nil, minicpm5.ForwardOptions{CaptureHidden: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, h := range out.Hidden {
		ht, _ := b.ToHost(h)
		if !bytes.Equal(ht.Data, d.Get(LayerTap(i, "out")).Data) {
			t.Errorf("layers.%d.out: differs from Forward's hidden state %d", i, i)
		}
	}
	lt, _ := b.ToHost(out.Logits)
	if !bytes.Equal(lt.Data, d.Get("logits").Data) {
		t.Errorf("logits with taps differ from logits without")
	}

	path := filepath.Join(t.TempDir(), "taps.safetensors")
	if err := d.Write(path); err != nil {
		t.Fatal(err)
	}
	back, err := ReadDump(path)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Names, d.Names) || !slices.Equal(back.Meta.PromptIDs, ids) || back.Meta.Backend != "cpu" || back.Meta.DType != "BF16" {
		t.Errorf("read back: names %v ids %v meta %+v", back.Names, back.Meta.PromptIDs, back.Meta)
	}
	for _, n := range d.Names {
		if !bytes.Equal(back.Get(n).Data, d.Get(n).Data) || !back.Get(n).Shape.Equal(d.Get(n).Shape) {
			t.Errorf("tap %s: differs after write and read", n)
		}
	}
	if _, err := ReadDump(filepath.Join(dir, "model.safetensors")); err == nil || !strings.Contains(err.Error(), "mlxgo-taps") {
		t.Errorf("ReadDump(model.safetensors): got %v, want an error naming the format", err)
	}
}

// TestNoFault: the CPU backend against mlx_lm's own taps on every float32
// checkpoint: every tap within tolerance, and no op over its tolerance
// against float64 when replayed in isolation (which also checks the float64
// evaluations of every op kind: dense and quantized 4/8-bit heads, tied
// head, llama3 frequencies).
func TestNoFault(t *testing.T) {
	for _, name := range []string{"optiq-f32", "q4g64-f32", "q8g32-f32", "fp-f32", "tied-f32", "llama3rope-f32"} {
		t.Run(name, func(t *testing.T) {
			dir, dump := fixture(t, name)
			r, err := Diff(Options{Model: dir, A: Side{Backend: "cpu"}, B: Side{File: dump}, Op: "first", Engines: []Side{}})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass() || r.Exact {
				t.Fatalf("cpu vs oracle: got %s (exact %v), want every tap within tolerance", r.Summary(), r.Exact)
			}
			layers := 3
			if name == "fp-f32" {
				layers = 2
			}
			if len(r.Taps) != len(TapNames(layers)) || len(r.OnlyA)+len(r.OnlyB) > 0 {
				t.Errorf("compared %d taps (only A %v, only B %v), want %d", len(r.Taps), r.OnlyA, r.OnlyB, len(TapNames(layers)))
			}
			for _, s := range r.Taps {
				if s.Limit <= 0 || s.Cosine < 0.999999 {
					t.Errorf("tap %s: limit %v cosine %v, want a positive limit and cosine ~1", s.Name, s.Limit, s.Cosine)
				}
			}

			ck, err := checkpoint.Open(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			e, err := OpenEngine(Side{Backend: "cpu"}, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			in, _ := ReadDump(dump)
			taps := append([]string{"embed", "norm", "logits"}, TapNames(layers)[1:14]...)
			for _, tap := range taps {
				rp, err := ReplayTap(tap, in, ck, []*Engine{e}, e, nil, false)
				if err != nil {
					t.Fatalf("replay %s: %v", tap, err)
				}
				if rp.Fault != "" {
					t.Errorf("replay %s: fault %q (%s), want none", tap, rp.Fault, rp.Verdict)
				}
				for _, st := range rp.Steps {
					if r := st.Results[0]; r.Error != "" || r.Over {
						t.Errorf("replay %s, op %s: cpu err/scale %v vs float64 (limit %v, error %q)", tap, st.Step, r.NormErr, r.Limit, r.Error)
					}
				}
			}
		})
	}
}

// ropeFault is the CPU backend with RoPE applied at offset+1.
type ropeFault struct{ backend.Backend }

func (f ropeFault) RoPE(x backend.Array, p backend.RoPE, off backend.Offset) backend.Array {
	off.Scalar++
	return f.Backend.RoPE(x, p, off)
}

// scaleFault is the CPU backend whose QuantizedMatmul reads one scale of one
// weight (matched by content) one ulp too large.
type scaleFault struct {
	backend.Backend
	target     *tensor.Dense
	row, group int
}

func (f scaleFault) QuantizedMatmul(x backend.Array, q backend.QuantizedArray, transpose bool) backend.Array {
	s, err := f.Backend.ToHost(q.Scales)
	if err == nil && s.Shape.Equal(f.target.Shape) && bytes.Equal(s.Data, f.target.Data) {
		p := s.Clone()
		v := p.Float32s()
		k := f.row*p.Shape[1] + f.group
		v[k] = math.Nextafter32(v[k], float32(math.Inf(1)))
		q.Scales = f.Backend.FromHost(p)
	}
	return f.Backend.QuantizedMatmul(x, q, transpose)
}

func faulty(name string, wrap func(b backend.Backend) backend.Backend) Side {
	return Side{Backend: "cpu", Name: name, Open: func() (backend.Backend, error) {
		b, err := cpu.New(backend.Options{})
		if err != nil {
			return nil, err
		}
		return wrap(b), nil
	}}
}

// TestPlantedFaults: diff names the first failing tap and the op, whether
// the reference is the same implementation (exact) or the oracle's dump.
func TestPlantedFaults(t *testing.T) {
	rope := faulty("cpu+rope-fault", func(b backend.Backend) backend.Backend { return ropeFault{b} })
	dirF32, dumpF32 := fixture(t, "optiq-f32")
	ck, err := checkpoint.Open(dirF32)
	if err != nil {
		t.Fatal(err)
	}
	target := ck.Layers[1].Gate.Scales.Clone()
	ck.Close()
	scale := faulty("cpu+scale-fault", func(b backend.Backend) backend.Backend { return scaleFault{b, target, 5, 1} })
	dirBF16, dumpBF16 := fixture(t, "optiq-bf16")

	cases := []struct {
		name          string
		dir           string
		a, b          Side
		exact         bool
		tap, op, sick string
	}{
		{"rope/f32/exact", dirF32, Side{Backend: "cpu"}, rope, true, "layers.0.q", "rope", "cpu+rope-fault"},
		{"rope/bf16/exact", dirBF16, Side{Backend: "cpu"}, rope, true, "layers.0.q", "rope", "cpu+rope-fault"},
		{"rope/f32/oracle", dirF32, rope, Side{File: dumpF32}, false, "layers.0.q", "rope", "cpu+rope-fault"},
		{"rope/bf16/oracle", dirBF16, rope, Side{File: dumpBF16}, false, "layers.0.q", "rope", "cpu+rope-fault"},
		{"scale-ulp/f32/exact", dirF32, Side{Backend: "cpu"}, scale, true, "layers.1.mlp.gate", "gate_proj (linear)", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, err := Diff(Options{Model: c.dir, A: c.a, B: c.b, Op: "first", Engines: []Side{{Backend: "cpu", Precision: "high"}}})
			if err != nil {
				t.Fatal(err)
			}
			if r.Exact != c.exact {
				t.Errorf("exact regime: got %v, want %v", r.Exact, c.exact)
			}
			if r.FirstFail != c.tap {
				t.Fatalf("first failing tap: got %q, want %q (%s)", r.FirstFail, c.tap, r.Summary())
			}
			for _, s := range r.Taps {
				if s.Name == c.tap {
					break
				}
				if !s.Pass {
					t.Errorf("tap %s before %s fails", s.Name, c.tap)
				}
			}
			if len(r.Replays) != 1 {
				t.Fatalf("got %d replays, want 1", len(r.Replays))
			}
			rp := r.Replays[0]
			if rp.Fault != c.op {
				t.Fatalf("faulty op: got %q, want %q (verdict: %s)", rp.Fault, c.op, rp.Verdict)
			}
			if c.sick != "" && rp.Blame != c.sick {
				t.Errorf("blame: got %q, want %q (verdict: %s)", rp.Blame, c.sick, rp.Verdict)
			}
			if c.op == "rope" && rp.Steps[0].Differs {
				t.Errorf("q_proj differs in isolation, want only rope (%+v)", rp.Steps[0])
			}
		})
	}
}

// TestSameImplementationAgrees: two runs of one implementation are
// bit-identical (the exact regime passes), and cpu vs cpu:high is compared
// with tolerances and passes.
func TestSameImplementationAgrees(t *testing.T) {
	dir, _ := fixture(t, "q4g64-bf16")
	for _, b := range []Side{{Backend: "cpu"}, {Backend: "cpu", Precision: "high"}} {
		t.Run(b.Label(), func(t *testing.T) {
			r, err := Diff(Options{Model: dir, A: Side{Backend: "cpu"}, B: b, Op: "layers.1.rope", Engines: []Side{}})
			if err != nil {
				t.Fatal(err)
			}
			if !r.Pass() || r.Exact != (b.Precision == "") {
				t.Errorf("got %s (exact %v)", r.Summary(), r.Exact)
			}
			if len(r.Replays) != 2 || r.Replays[0].Tap != "layers.1.q" || r.Replays[1].Tap != "layers.1.k" {
				t.Fatalf("--op layers.1.rope: got %d replays, want layers.1.q and layers.1.k", len(r.Replays))
			}
			for _, rp := range r.Replays {
				if rp.Fault != "" {
					t.Errorf("replay %s: fault %q: %s", rp.Tap, rp.Fault, rp.Verdict)
				}
			}
		})
	}
}

func TestReportOutputs(t *testing.T) {
	dir, dump := fixture(t, "optiq-f32")
	r, err := Diff(Options{Model: dir, A: faulty("cpu+rope-fault", func(b backend.Backend) backend.Backend { return ropeFault{b} }), B: Side{File: dump}, Op: "first", Engines: []Side{}})
	if err != nil {
		t.Fatal(err)
	}
	var text, md, js bytes.Buffer
	r.WriteText(&text)
	r.WriteMarkdown(&md)
	if err := r.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"FAIL <- first", "layers.0.q", "worst elements of layers.0.q", "verdict: op rope of layers.0.q differs in isolation"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q", want)
		}
	}
	if !strings.Contains(md.String(), "| tap | dtype |") || !strings.Contains(js.String(), `"first_fail": "layers.0.q"`) {
		t.Errorf("markdown or json report lacks its table / first_fail")
	}
	path := filepath.Join(t.TempDir(), "growth.png")
	if err := PlotPNG(r, path); err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(path)
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	colors := map[[3]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			colors[[3]uint32{r >> 8, g >> 8, bl >> 8}] = true
		}
	}
	for _, s := range plotSeries {
		if !colors[[3]uint32{uint32(s.c.R), uint32(s.c.G), uint32(s.c.B)}] {
			t.Errorf("plot: no pixel of series %s's color", s.name)
		}
	}
}

func TestParseSide(t *testing.T) {
	for _, c := range []struct {
		in      string
		backend string
		prec    string
		file    bool
		bad     bool
	}{
		{"cpu", "cpu", "", false, false},
		{"cpu:high", "cpu", "high", false, false},
		{"x.safetensors", "", "", true, false},
		{"nosuch", "", "", false, true},
		{"", "", "", false, true},
	} {
		t.Run(c.in, func(t *testing.T) {
			s, err := ParseSide(c.in)
			if (err != nil) != c.bad || s.Backend != c.backend || s.Precision != c.prec || (s.File != "") != c.file {
				t.Errorf("ParseSide(%q) = %+v, %v", c.in, s, err)
			}
		})
	}
}
