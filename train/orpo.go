package train

import (
	"fmt"
	"math"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// DefaultORPOLambda is ORPO's λ by default (the paper's smallest value,
// TRL's ORPOConfig.beta).
const DefaultORPOLambda = 0.1

// Pair is one tokenized preference pair: the prompt (every token up to
// the responses, chat template included) and the chosen and rejected
// responses that follow it.
type Pair struct {
	Prompt, Chosen, Rejected []int32
	Source                   string // "file:line", for errors
}

// Layout is the pair's prefix-shared layout.
func (p Pair) Layout() PrefixLayout {
	return PrefixLayout{P: len(p.Prompt), Rc: len(p.Chosen), Rr: len(p.Rejected)}
}

// ORPOValues are the arrays of an ORPO loss over a batch of pairs, each
// a float32 scalar: the loss, and the means over the pairs of the
// log-odds ratio and of the chosen and rejected length-normalised
// log-probabilities ℓ_w and ℓ_l.
type ORPOValues struct {
	Loss, LogOdds, ChosenLogP, RejectedLogP backend.Array
}

// Arrays returns the four arrays, Loss first.
func (v ORPOValues) Arrays() []backend.Array {
	return []backend.Array{v.Loss, v.LogOdds, v.ChosenLogP, v.RejectedLogP}
}

// PairForward is how ORPOLoss reads a preference pair.
type PairForward int

const (
	// Shared is one prefix-shared forward of [prompt | chosen | rejected]
	// (PrefixCache) with the blocked attention of its PrefixMask.
	Shared PairForward = iota
	// SharedDense is the same forward with the plain attention under the
	// mask's Bool [T, T] array.
	SharedDense
	// TwoForwards is two forwards, [prompt | chosen] and [prompt | rejected].
	TwoForwards
)

// ORPOLoss is the ORPO loss of Hong, Lee and Thorne (2024) over pairs,
// the mean over the pairs of
//
//	L = −ℓ_w + λ·softplus(−logOR),
//	logOR = (ℓ_w − ℓ_l) − [log(1 − e^{ℓ_w}) − log(1 − e^{ℓ_l})],
//
// ℓ the mean log-probability of a response's tokens given the prompt
// (prompt tokens are not counted). fw says how a pair is read: one
// forward of [prompt | chosen | rejected] under the prefix-shared mask and
// RoPE blocks (PrefixCache), or two forwards. b must implement backend.Differentiator; call it
// inside a ValueAndGrad function to train. fo is the forward's options
// (a checkpointing Block hook; only for the two-forward path, which
// calls the model without a cache).
func ORPOLoss(b backend.Backend, m *minicpm5.Model, pairs []Pair, lambda float64, fw PairForward, fo minicpm5.ForwardOptions) (ORPOValues, error) {
	if _, ok := b.(backend.Differentiator); !ok {
		return ORPOValues{}, fmt.Errorf("train: backend %s has no gradients", b.Name())
	}
	if len(pairs) == 0 {
		return ORPOValues{}, fmt.Errorf("train: ORPO loss of no pairs")
	}
	if !(lambda >= 0) || math.IsInf(lambda, 0) {
		return ORPOValues{}, fmt.Errorf("train: ORPO λ %v, want a finite number ≥ 0", lambda)
	}
	var sum [4]backend.Array
	for _, p := range pairs {
		if err := checkPair(p, m.VocabSize()); err != nil {
			return ORPOValues{}, err
		}
		var lw, ll backend.Array
		var err error
		if fw == TwoForwards {
			lw, ll, err = twoForwardLogPs(b, m, p, fo)
		} else {
			lw, ll, err = sharedLogPs(b, m, p, fw == SharedDense)
		}
		if err != nil {
			return ORPOValues{}, fmt.Errorf("train: %s: %w", p.Source, err)
		}
		loss, lor := ORPOTerms(b, lw, ll, lambda)
		for i, x := range []backend.Array{loss, lor, lw, ll} {
			if sum[i] == nil {
				sum[i] = x
			} else {
				sum[i] = b.Binary(backend.Add, sum[i], x)
			}
		}
	}
	n := b.Full(tensor.Shape{}, float64(len(pairs)), tensor.F32)
	for i := range sum {
		sum[i] = b.Binary(backend.Divide, sum[i], n)
	}
	return ORPOValues{Loss: sum[0], LogOdds: sum[1], ChosenLogP: sum[2], RejectedLogP: sum[3]}, nil
}

func checkPair(p Pair, vocab int) error {
	if l := p.Layout(); l.check() != nil {
		return fmt.Errorf("train: %s: prompt of %d tokens, chosen response of %d, rejected of %d: each needs at least one", p.Source, l.P, l.Rc, l.Rr)
	}
	for _, part := range [][]int32{p.Prompt, p.Chosen, p.Rejected} {
		for _, v := range part {
			if v < 0 || int(v) >= vocab {
				return fmt.Errorf("train: %s: token %d is outside the model's vocabulary of %d", p.Source, v, vocab)
			}
		}
	}
	return nil
}

// ORPOTerms returns the ORPO loss −ℓ_w + λ·softplus(−logOR) and logOR of
// the float32 scalars lw and ll (each a mean token log-probability, ≤ 0).
// log(1 − eˣ) is computed stably: log(1 − eˣ) for x < −ln 2, else
// log(−expm1(x)) with expm1(x) = 2t/(1 − t), t = tanh(x/2) (exact in
// exact arithmetic, and free of cancellation near 0); x is first clamped
// to ≤ −2⁻³⁰ (a response of probability exactly 1 would make logOR
// infinite). softplus(z) is z + log(1 + e^{−z}) for z > 0, else
// log(1 + e^z). Each branch of a select reads a clamped input, so the
// branch not taken stays finite and passes no NaN into the gradient.
func ORPOTerms(b backend.Backend, lw, ll backend.Array, lambda float64) (loss, logOR backend.Array) {
	lor := b.Binary(backend.Subtract, b.Binary(backend.Subtract, lw, ll),
		b.Binary(backend.Subtract, log1mexp(b, lw), log1mexp(b, ll)))
	sp := softplus(b, b.Unary(backend.Negative, lor))
	lam := b.Full(tensor.Shape{}, lambda, tensor.F32)
	loss = b.Binary(backend.Add, b.Unary(backend.Negative, lw), b.Binary(backend.Multiply, lam, sp))
	return loss, lor
}

func f32(b backend.Backend, v float64) backend.Array { return b.Full(tensor.Shape{}, v, tensor.F32) }

// log1mexp is log(1 − eˣ) for x < 0 (see ORPOTerms).
func log1mexp(b backend.Backend, x backend.Array) backend.Array {
	ln2 := f32(b, -math.Ln2)
	one := f32(b, 1)
	x = b.Binary(backend.Minimum, f32(b, -math.Ldexp(1, -30)), x)
	lo := b.Binary(backend.Minimum, x, ln2) // the x < −ln 2 branch
	far := b.Unary(backend.Log, b.Binary(backend.Subtract, one, b.Unary(backend.Exp, lo)))
	hi := b.Binary(backend.Maximum, x, ln2) // the x ≥ −ln 2 branch
	t := b.Unary(backend.Tanh, b.Binary(backend.Multiply, hi, f32(b, 0.5)))
	near := b.Binary(backend.Subtract,
		b.Unary(backend.Log, b.Binary(backend.Multiply, t, f32(b, -2))),
		b.Unary(backend.Log, b.Binary(backend.Subtract, one, t)))
	return b.Where(b.Binary(backend.Less, x, ln2), far, near)
}

// softplus is log(1 + e^z) (see ORPOTerms).
func softplus(b backend.Backend, z backend.Array) backend.Array {
	zero, one := f32(b, 0), f32(b, 1)
	pos := b.Binary(backend.Maximum, zero, z)
	hi := b.Binary(backend.Add, pos, b.Unary(backend.Log, b.Binary(backend.Add, one, b.Unary(backend.Exp, b.Unary(backend.Negative, pos)))))
	lo := b.Unary(backend.Log, b.Binary(backend.Add, one, b.Unary(backend.Exp, b.Binary(backend.Minimum, zero, z))))
	return b.Where(b.Binary(backend.Greater, z, zero), hi, lo)
}

// twoForwardLogPs runs [prompt | chosen] and [prompt | rejected] as two
// forwards and returns ℓ_w and ℓ_l.
func twoForwardLogPs(b backend.Backend, m *minicpm5.Model, p Pair, fo minicpm5.ForwardOptions) (lw, ll backend.Array, err error) {
	out := make([]backend.Array, 2)
	for i, resp := range [][]int32{p.Chosen, p.Rejected} {
		seq := append(append(make([]int32, 0, len(p.Prompt)+len(resp)), p.Prompt...), resp...)
		rows := make([]int, len(resp))
		for k := range rows {
			rows[k] = len(p.Prompt) - 1 + k
		}
		o := fo
		o.LogitsRows = rows
		ids := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(seq)}, seq))
		r, err := m.Forward(ids, nil, o)
		if err != nil {
			return nil, nil, err
		}
		out[i] = meanLogP(b, r.Logits, resp)
	}
	return out[0], out[1], nil
}

// sharedLogPs runs the pair as one prefix-shared forward and returns ℓ_w
// and ℓ_l, the head applied to the predicting rows only (chosen's, then
// rejected's); dense attends under the Bool mask array.
func sharedLogPs(b backend.Backend, m *minicpm5.Model, p Pair, dense bool) (lw, ll backend.Array, err error) {
	l := p.Layout()
	c, err := NewPrefixCache(b, l)
	if err != nil {
		return nil, nil, err
	}
	c.Dense = dense
	defer c.Release()
	seq := make([]int32, 0, l.T())
	seq = append(append(append(seq, p.Prompt...), p.Chosen...), p.Rejected...)
	cr, rr := l.PredictingRows()
	ids := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(seq)}, seq))
	r, err := m.Forward(ids, c.Caches(len(m.Layers)), minicpm5.ForwardOptions{LogitsRows: append(cr, rr...)})
	if err != nil {
		return nil, nil, err
	}
	V := r.Logits.Shape()[2]
	lc := b.Slice(r.Logits, []int{0, 0, 0}, []int{1, l.Rc, V})
	lr := b.Slice(r.Logits, []int{0, l.Rc, 0}, []int{1, l.Rc + l.Rr, V})
	return meanLogP(b, lc, p.Chosen), meanLogP(b, lr, p.Rejected), nil
}

// meanLogP is the mean over the rows of logits [1, n, V] of the
// log-probability of targets[k] at row k, in float32: the logit less the
// logsumexp, both after the row's maximum is subtracted as a constant
// (Loss's arithmetic, negated).
func meanLogP(b backend.Backend, logits backend.Array, targets []int32) backend.Array {
	d := b.(backend.Differentiator)
	V := logits.Shape()[2]
	flat := make([]int32, len(targets))
	for i, v := range targets {
		flat[i] = v + int32(i*V)
	}
	pick := b.FromHost(tensor.FromInt32(tensor.Shape{1, len(targets)}, flat))
	l := b.Binary(backend.Subtract, logits, d.StopGradient(b.Max(logits, -1, true)))
	score := b.Take(b.Reshape(l, -1), pick, 0)
	lp := b.Binary(backend.Subtract, score, b.LogSumExp(l, -1, false))
	sum := b.Sum(b.Reshape(b.AsType(lp, tensor.F32), -1), 0, false)
	return b.Binary(backend.Divide, sum, f32(b, float64(len(targets))))
}
