package debug

import (
	"fmt"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// Replay is one tap's ops replayed in isolation: each op gets the same
// inputs on every engine (the inputs side A captured, or for the second op
// of q and k the float64 result of the first rounded to the tap's dtype)
// and is measured against a plain float64 evaluation of the op on those
// inputs, and, when both sides are backends, side A against side B.
type Replay struct {
	Tap   string       `json:"tap"`
	Steps []StepReplay `json:"steps"`
	// Fault is the first op that differs in isolation ("" when none does);
	// Blame is the engine judged wrong ("" when undecided).
	Fault   string `json:"fault"`
	Blame   string `json:"blame"`
	Verdict string `json:"verdict"`
	// Notes name ops where one engine is much farther from float64 than the
	// nearest (a less accurate kernel that is still within tolerance).
	Notes []string `json:"notes,omitempty"`
}

// StepReplay is one op of a replay.
type StepReplay struct {
	Step    Step           `json:"step"`
	Input   string         `json:"input"` // where its inputs come from
	DType   string         `json:"dtype"`
	Results []EngineResult `json:"results"` // every engine against float64
	Pair    *PairResult    `json:"pair,omitempty"`
	Differs bool           `json:"differs"`
	Blame   string         `json:"blame,omitempty"`
}

// EngineResult is one engine's output of an op against the float64
// evaluation, in the op's dtype.
type EngineResult struct {
	Engine  string `json:"engine"`
	Side    string `json:"side,omitempty"` // "A", "B" or "" for an extra engine
	NormErr Num    `json:"norm_err"`
	MaxAbs  Num    `json:"max_abs"`
	ULP50   uint64 `json:"ulp_p50"`
	ULP99   uint64 `json:"ulp_p99"`
	ULPMax  uint64 `json:"ulp_max"`
	Limit   Num    `json:"limit"` // the tap class's tolerance against float64
	Over    bool   `json:"over"`
	Error   string `json:"error,omitempty"`
}

// PairResult is side A's engine against side B's on the same inputs.
type PairResult struct {
	NormErr Num    `json:"norm_err"`
	MaxAbs  Num    `json:"max_abs"`
	ULPMax  uint64 `json:"ulp_max"`
	Limit   Num    `json:"limit"`
	Exact   bool   `json:"exact"`
	Pass    bool   `json:"pass"`
}

// opFn runs one op on a backend with the model's modules.
type opFn func(b backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array

// stepSpec is one op to replay: its inputs, how to run it, its float64 value.
type stepSpec struct {
	step  Step
	input string
	ins   []*tensor.Dense
	run   opFn
	ref   []float64
	shape tensor.Shape
}

// ReplayTap replays the ops of tap on every engine, with inputs from in
// (side A's taps) and float64 weights from ck. a and b are the sides'
// engines (nil for a side that is a dump); exact asks A and B to agree bit
// for bit. engines must hold at least one engine (its model gives the RoPE
// parameters); a and b, when set, should be among them.
func ReplayTap(tap string, in *Dump, ck *checkpoint.Checkpoint, engines []*Engine, a, b *Engine, exact bool) (*Replay, error) {
	if len(engines) == 0 {
		return nil, fmt.Errorf("debug: replay of %s needs at least one backend", tap)
	}
	specs, err := buildSteps(tap, in, ck, engines[0].M.Layers[0].SelfAttn.RoPE)
	if err != nil {
		return nil, err
	}
	rp := &Replay{Tap: tap}
	class := Class(tap)
	for _, sp := range specs {
		dt := in.Taps[tap].DType
		tol := ToleranceFor(class, dt, false)
		sr := StepReplay{Step: sp.step, Input: sp.input, DType: dt.String()}
		outs := map[*Engine]*tensor.Dense{}
		var errs = map[*Engine]float64{}
		for _, e := range engines {
			er := EngineResult{Engine: e.Label, Limit: Num(tol.NormErr)}
			if e == a {
				er.Side = "A"
			} else if e == b {
				er.Side = "B"
			}
			out, err := runOp(e, sp.run, sp.ins)
			if err == nil && out.Len() != len(sp.ref) {
				err = fmt.Errorf("output has %d values, the float64 evaluation %d", out.Len(), len(sp.ref))
			}
			if err != nil {
				er.Error, er.Over = err.Error(), true
			} else {
				m := metrics(out.ToFloat64(), sp.ref, out.DType)
				er.NormErr, er.MaxAbs, er.ULP50, er.ULP99, er.ULPMax = Num(m.normErr), Num(m.maxAbs), m.ulp50, m.ulp99, m.ulpMax
				er.Over = m.normErr > tol.NormErr
				outs[e], errs[e] = out, m.normErr
			}
			sr.Results = append(sr.Results, er)
		}
		judge(&sr, engines, a, b, outs, errs, class, dt, exact)
		rp.Steps = append(rp.Steps, sr)
		rp.Notes = append(rp.Notes, accuracyNotes(sr)...)
		if sr.Differs && rp.Fault == "" {
			rp.Fault, rp.Blame = sp.step.String(), sr.Blame
		}
	}
	rp.Verdict = verdict(rp, a, b)
	return rp, nil
}

// judge decides whether a step differs in isolation and whom to blame.
func judge(sr *StepReplay, engines []*Engine, a, b *Engine, outs map[*Engine]*tensor.Dense, errs map[*Engine]float64, class string, dt tensor.DType, exact bool) {
	if a != nil && b != nil && outs[a] != nil && outs[b] != nil {
		tol := ToleranceFor(class, dt, exact)
		m := metrics(outs[a].ToFloat64(), outs[b].ToFloat64(), dt)
		p := &PairResult{NormErr: Num(m.normErr), MaxAbs: Num(m.maxAbs), ULPMax: m.ulpMax, Limit: Num(tol.NormErr), Exact: exact}
		if exact {
			p.Pass = m.maxAbs == 0 && m.ulpMax == 0
		} else {
			p.Pass = m.normErr <= tol.NormErr
		}
		sr.Pair = p
		if !p.Pass {
			sr.Differs = true
			// Blame the side clearly farther from float64.
			ea, eb := errs[a], errs[b]
			switch {
			case eb > 2*ea:
				sr.Blame = b.Label
			case ea > 2*eb:
				sr.Blame = a.Label
			}
		}
	}
	judged := []*Engine{}
	for _, e := range engines {
		if e == a || e == b {
			judged = append(judged, e)
		}
	}
	if len(judged) == 0 {
		judged = engines
	}
	var over []string
	for i, e := range engines {
		for _, j := range judged {
			if j == e && sr.Results[i].Over {
				over = append(over, e.Label)
			}
		}
	}
	if len(over) > 0 {
		sr.Differs = true
		if sr.Blame == "" {
			sr.Blame = strings.Join(over, ", ")
		}
	}
}

func verdict(rp *Replay, a, b *Engine) string {
	if rp.Fault != "" {
		who := "a kernel fault; which side is wrong is undecided (both are within a factor 2 of each other against float64)"
		if rp.Blame != "" {
			who = "a kernel fault on " + rp.Blame + " (farther from the float64 evaluation)"
		}
		return fmt.Sprintf("op %s of %s differs in isolation on identical inputs: %s", rp.Fault, rp.Tap, who)
	}
	if a != nil && b != nil {
		return fmt.Sprintf("every op of %s agrees in isolation (%s within tolerance of float64 and of each other): the difference at this tap is carried in from its inputs, i.e. rounding accumulated upstream", rp.Tap, a.Label+" and "+b.Label)
	}
	return fmt.Sprintf("every op of %s agrees in isolation on the backends run here (within tolerance of float64): the difference at this tap comes from its inputs (rounding accumulated upstream) or from the dump side's own kernels, which cannot be replayed from a dump", rp.Tap)
}

// runOp runs fn on e with host inputs ins and returns the output on the host.
func runOp(e *Engine, fn opFn, ins []*tensor.Dense) (out *tensor.Dense, err error) {
	err = e.B.Do(func() (err error) {
		defer backend.Recover(&err)
		s := e.B.Scope()
		defer s.Close()
		xs := make([]backend.Array, len(ins))
		for i, t := range ins {
			xs[i] = e.B.FromHost(t)
		}
		out, err = e.B.ToHost(fn(e.B, e.M, xs))
		return err
	})
	return out, err
}

// round returns v rounded to dt as a host tensor.
func round(shape tensor.Shape, v []float64, dt tensor.DType) *tensor.Dense {
	return tensor.FromFloat64(shape, v).Convert(dt)
}

// buildSteps prepares the ops of tap with their inputs and float64 values.
func buildSteps(tap string, in *Dump, ck *checkpoint.Checkpoint, rope *nn.RoPE) ([]stepSpec, error) {
	steps, err := Steps(tap)
	if err != nil {
		return nil, err
	}
	need := func(name string) (*tensor.Dense, error) {
		t := in.Taps[name]
		if t == nil {
			return nil, fmt.Errorf("debug: replaying %s needs tap %s, which side A's taps lack", tap, name)
		}
		return t, nil
	}
	if _, err := need(tap); err != nil {
		return nil, err
	}
	cfg := ck.Config
	eps := float32(cfg.RMSNormEps)
	i, s, _ := ParseTap(tap)
	if i >= len(ck.Layers) {
		return nil, fmt.Errorf("debug: tap %s: the checkpoint has %d layers", tap, len(ck.Layers))
	}
	prevOut := func() string {
		switch {
		case i < 0:
			return LayerTap(len(ck.Layers)-1, "out")
		case i == 0:
			return "embed"
		}
		return LayerTap(i-1, "out")
	}
	lt := func(n string) string { return LayerTap(i, n) }
	one := func(st Step, src string, run opFn, ref func(x []float64) ([]float64, error)) ([]stepSpec, error) {
		x, err := need(src)
		if err != nil {
			return nil, err
		}
		r, err := ref(x.ToFloat64())
		if err != nil {
			return nil, err
		}
		return []stepSpec{{step: st, input: "A's tap " + src, ins: []*tensor.Dense{x}, run: run, ref: r}}, nil
	}
	two := func(st Step, s1, s2 string, run opFn, ref func(x, y []float64) []float64) ([]stepSpec, error) {
		x, err := need(s1)
		if err != nil {
			return nil, err
		}
		y, err := need(s2)
		if err != nil {
			return nil, err
		}
		return []stepSpec{{step: st, input: "A's taps " + s1 + ", " + s2, ins: []*tensor.Dense{x, y}, run: run,
			ref: ref(x.ToFloat64(), y.ToFloat64())}}, nil
	}
	layer := func(m *minicpm5.Model) *minicpm5.Block { return m.Layers[i] }
	var L *checkpoint.Layer
	if i >= 0 {
		L = &ck.Layers[i]
	}
	lin := func(pick func(m *minicpm5.Model) nn.Linear, w *checkpoint.Linear) (opFn, func(x []float64) ([]float64, error)) {
		return func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
				return pick(m).Forward(xs[0])
			},
			func(x []float64) ([]float64, error) { return linear64(x, w) }
	}
	add := func(b backend.Backend, _ *minicpm5.Model, xs []backend.Array) backend.Array {
		return b.Binary(backend.Add, xs[0], xs[1])
	}

	switch s {
	case "embed":
		ids := in.Meta.PromptIDs
		r, err := embed64(ids, ck.Embed)
		if err != nil {
			return nil, err
		}
		return []stepSpec{{step: steps[0], input: "prompt ids", ins: []*tensor.Dense{tensor.FromInt32(tensor.Shape{1, len(ids)}, ids)},
			run: func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
				return m.EmbedTokens.Forward(xs[0])
			},
			ref: r}}, nil
	case "norm":
		return one(steps[0], prevOut(), func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
			return m.Norm.Forward(xs[0])
		},
			func(x []float64) ([]float64, error) { return rms64(x, ck.Norm, eps), nil })
	case "logits":
		return one(steps[0], "norm", func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
			if m.LMHead != nil {
				return m.LMHead.Forward(xs[0])
			}
			return m.EmbedTokens.AsLinear(xs[0])
		}, func(x []float64) ([]float64, error) { return head64(x, ck) })
	case "input_norm", "post_norm":
		src, w := prevOut(), L.InputNorm
		pick := func(m *minicpm5.Model) *nn.RMSNorm { return layer(m).InputLayernorm }
		if s == "post_norm" {
			src, w = lt("residual"), L.PostAttentionNorm
			pick = func(m *minicpm5.Model) *nn.RMSNorm { return layer(m).PostAttentionLayernorm }
		}
		return one(steps[0], src, func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
			return pick(m).Forward(xs[0])
		},
			func(x []float64) ([]float64, error) { return rms64(x, w, eps), nil })
	case "q", "k", "v":
		w, H := L.Q, cfg.NumAttentionHeads
		pick := func(m *minicpm5.Model) nn.Linear { return layer(m).SelfAttn.QProj }
		switch s {
		case "k":
			w, H = L.K, cfg.NumKeyValueHeads
			pick = func(m *minicpm5.Model) nn.Linear { return layer(m).SelfAttn.KProj }
		case "v":
			w, H = L.V, cfg.NumKeyValueHeads
			pick = func(m *minicpm5.Model) nn.Linear { return layer(m).SelfAttn.VProj }
		}
		run, ref := lin(pick, w)
		sp, err := one(steps[0], lt("input_norm"), run, ref)
		if err != nil || s == "v" {
			return sp, err
		}
		x := in.Taps[lt("input_norm")]
		B, T := x.Shape[0], x.Shape[1]
		hd := cfg.HeadDim
		shape := tensor.Shape{B, H, T, hd}
		qh := heads(sp[0].ref, B, T, H, hd, true)
		xin := round(shape, qh, in.Taps[tap].DType)
		return append(sp, stepSpec{step: steps[1], input: "float64 " + steps[0].Module + " of A's " + lt("input_norm") + ", rounded to " + xin.DType.String(),
			ins: []*tensor.Dense{xin},
			run: func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
				return layer(m).SelfAttn.RoPE.Forward(xs[0], 0)
			},
			ref: rope64(xin.ToFloat64(), shape, rope)}), nil
	case "attn":
		q, err := need(lt("q"))
		if err != nil {
			return nil, err
		}
		k, err := need(lt("k"))
		if err != nil {
			return nil, err
		}
		v, err := need(lt("v"))
		if err != nil {
			return nil, err
		}
		if len(q.Shape) != 4 || len(k.Shape) != 4 || !k.Shape.Equal(v.Shape) {
			return nil, fmt.Errorf("debug: q %v, k %v, v %v: want [B, H, L, hd] and k, v of one shape", q.Shape, k.Shape, v.Shape)
		}
		B, H, T, D, Hk, S := q.Shape[0], q.Shape[1], q.Shape[2], q.Shape[3], k.Shape[1], k.Shape[2]
		mask := backend.Mask(backend.CausalMask{})
		if T == 1 {
			mask = backend.NoMask{}
		}
		return []stepSpec{{step: steps[0], input: "A's taps " + lt("q") + ", " + lt("k") + ", " + lt("v"),
			ins: []*tensor.Dense{q, k, v},
			run: func(b backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
				return b.ScaledDotProductAttention(xs[0], xs[1], xs[2], layer(m).SelfAttn.Scale, mask)
			},
			ref: sdpa64(q.ToFloat64(), k.ToFloat64(), v.ToFloat64(), B, H, Hk, T, S, D, float64(nn.AttentionScale(cfg.HeadDim)), T > 1)}}, nil
	case "o_proj":
		a, err := need(lt("attn"))
		if err != nil {
			return nil, err
		}
		if len(a.Shape) != 4 {
			return nil, fmt.Errorf("debug: tap %s has shape %v, want [B, H, L, hd]", lt("attn"), a.Shape)
		}
		B, H, T, D := a.Shape[0], a.Shape[1], a.Shape[2], a.Shape[3]
		x := round(tensor.Shape{B, T, H * D}, heads(a.ToFloat64(), B, T, H, D, false), a.DType)
		r, err := linear64(x.ToFloat64(), L.O)
		if err != nil {
			return nil, err
		}
		return []stepSpec{{step: steps[0], input: "A's tap " + lt("attn") + " as [B, L, H·hd]", ins: []*tensor.Dense{x},
			run: func(_ backend.Backend, m *minicpm5.Model, xs []backend.Array) backend.Array {
				return layer(m).SelfAttn.OProj.Forward(xs[0])
			}, ref: r}}, nil
	case "residual":
		return two(steps[0], prevOut(), lt("o_proj"), add, add64)
	case "out":
		return two(steps[0], lt("residual"), lt("mlp.down"), add, add64)
	case "mlp.gate":
		run, ref := lin(func(m *minicpm5.Model) nn.Linear { return layer(m).MLP.GateProj }, L.Gate)
		return one(steps[0], lt("post_norm"), run, ref)
	case "mlp.up":
		run, ref := lin(func(m *minicpm5.Model) nn.Linear { return layer(m).MLP.UpProj }, L.Up)
		return one(steps[0], lt("post_norm"), run, ref)
	case "mlp.down":
		run, ref := lin(func(m *minicpm5.Model) nn.Linear { return layer(m).MLP.DownProj }, L.Down)
		return one(steps[0], lt("mlp.swiglu"), run, ref)
	case "mlp.swiglu":
		return two(steps[0], lt("mlp.gate"), lt("mlp.up"), func(b backend.Backend, _ *minicpm5.Model, xs []backend.Array) backend.Array {
			return b.SwiGLU(xs[0], xs[1])
		}, swiglu64)
	}
	return nil, fmt.Errorf("debug: no replay for tap %q", tap)
}

// ResolveOp turns an --op argument into the taps to replay: a tap name;
// "first" (the report's first failing tap); "layers.{i}.{op}" where op is
// an op class or module of Steps ("rope", "sdpa", "linear", "q_proj",
// "swiglu", ...): every tap of layer i made by it; or a bare op, at the
// layer of the first failing tap (layer 0 when there is none).
func ResolveOp(op string, r *Report, layers int) ([]string, error) {
	if op == "first" {
		if r.FirstFail == "" {
			return nil, nil
		}
		return []string{r.FirstFail}, nil
	}
	if _, _, ok := ParseTap(op); ok {
		return []string{op}, nil
	}
	layer, name := -2, op
	if rest, ok := strings.CutPrefix(op, "layers."); ok {
		num, n, found := strings.Cut(rest, ".")
		if _, err := fmt.Sscanf(num, "%d", &layer); !found || err != nil {
			return nil, fmt.Errorf("--op %q: want a tap name, layers.{i}.{op} or an op class", op)
		}
		name = n
	} else {
		layer = 0
		if i, _, ok := ParseTap(r.FirstFail); ok {
			layer = max(i, 0)
		}
	}
	var taps []string
	cands := []string{"embed", "norm", "logits"}
	for _, t := range LayerTaps {
		cands = append(cands, LayerTap(layer, t))
	}
	for _, t := range cands {
		steps, _ := Steps(t)
		for _, st := range steps {
			if st.Class == name || st.Module == name || (name == "quantized_matmul" || name == "matmul") && st.Class == "linear" {
				if i, _, _ := ParseTap(t); i == layer || (i < 0 && !strings.HasPrefix(op, "layers.")) {
					taps = append(taps, t)
				}
				break
			}
		}
	}
	if layer >= layers {
		return nil, fmt.Errorf("--op %q: the checkpoint has %d layers", op, layers)
	}
	if len(taps) == 0 {
		return nil, fmt.Errorf("--op %q: no tap is made by an op called %q (ops: embedding, rms_norm, linear, rope, sdpa, add, swiglu, or a module such as q_proj, gate_proj, input_layernorm)", op, name)
	}
	return taps, nil
}

// accuracyNotes flags engines at least 4x farther from float64 than the
// nearest engine on an op (and above 1e-6 of the scale, where the gap is
// more than a few roundings of float32).
func accuracyNotes(sr StepReplay) []string {
	best := -1.0
	bestName := ""
	for _, r := range sr.Results {
		if r.Error == "" && (best < 0 || float64(r.NormErr) < best) {
			best, bestName = float64(r.NormErr), r.Engine
		}
	}
	var notes []string
	for _, r := range sr.Results {
		if e := float64(r.NormErr); r.Error == "" && e > 1e-6 && e > 4*best {
			ratio := "inf"
			if best > 0 {
				ratio = fmt.Sprintf("%.0fx", e/best)
			}
			notes = append(notes, fmt.Sprintf("%s: %s is %s farther from float64 than %s (err/scale %.3g vs %.3g)", sr.Step, r.Engine, ratio, bestName, e, best))
		}
	}
	return notes
}
