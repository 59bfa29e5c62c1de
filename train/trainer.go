package train

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// Args are mlx_lm's TrainingArgs.
type Args struct {
	BatchSize             int
	Iters                 int
	ValBatches            int // -1: the whole validation set
	StepsPerReport        int
	StepsPerEval          int
	StepsPerSave          int
	MaxSeqLength          int
	AdapterFile           string // the adapters.safetensors the saves write
	GradAccumulationSteps int
}

// Report is one training report (mlx_lm's on_train_loss_report).
type Report struct {
	Iteration     int
	TrainLoss     float64
	LearningRate  float64
	ItPerSec      float64
	TokensPerSec  float64
	TrainedTokens int
	PeakMemoryGB  float64
}

// ValReport is one validation (on_val_loss_report; Iteration is the
// step it precedes, as mlx_lm's progress line prints it).
type ValReport struct {
	Iteration int
	ValLoss   float64
	ValTime   time.Duration
}

// Trainer trains the adapters of a model as mlx_lm's tuner.trainer.train.
type Trainer struct {
	B        backend.Backend // must implement backend.Differentiator
	Model    *minicpm5.Model
	Adapters []lora.Adapter
	Opt      *Optimizer
	// RNG is numpy's global generator (seeded with --seed): the order of
	// the training and validation batches.
	RNG *NumpyRNG
	// Dropout, when not nil, is each adapter's training dropout (nil:
	// none). Validation runs without it. With GradCheckpoint, its keys
	// must come from keys (setup's lora.DropoutMasks), which replays a
	// recomputed block's keys.
	Dropout func(x backend.Array) backend.Array
	keys    *dropoutKeys
	// GradCheckpoint recomputes each block in the backward instead of
	// keeping its intermediates (mlx_lm's --grad-checkpoint: every
	// block's call through mx.checkpoint, the block's adapters among the
	// checkpointed function's inputs).
	GradCheckpoint bool
	// SegmentLayers, when positive, trains with a segmented backward
	// (segment.go): the layers run in ranges of this many, only the
	// streams at the ranges' boundaries are kept, and each range is
	// recomputed in the backward. The gradients are the plain
	// backward's bit for bit. Excludes GradCheckpoint and Dropout.
	SegmentLayers int
	// LossChunk, when positive, computes the loss through the head in
	// chunks of this many rows (headloss.go): the same value bit for
	// bit, without [tokens, vocab] logits at once. 0: mlx_lm's loss on
	// the full logits.
	LossChunk int
	// NoCompile runs every training step op by op. Otherwise, on a
	// backend that compiles (backend.Compiler) the default loss's steps
	// are compiled as mlx_lm compiles them, unless the run has segments
	// or a chunked loss (compiled.go).
	NoCompile bool
	compiled  map[stepKind]compiledFn
	// dropShapes holds, per batch shape (B, L), the shapes of the dropout
	// masks of a step, in the order drawn (compiled.go).
	dropShapes map[[2]int][]tensor.Shape
	// PeakMemory, when set, reports the device's peak memory in bytes
	// (MLX's allocator peak, mx.get_peak_memory); nil reports the
	// backend's Stats().PeakBytes (the arrays it tracks).
	PeakMemory func() int64
	// Warn receives truncation warnings; nil discards them.
	Warn io.Writer
	// OnReport, OnVal and OnSave, when set, receive each report,
	// validation and saved checkpoint path.
	OnReport func(Report)
	OnVal    func(ValReport)
	OnSave   func(it int, path string)
	// OnStep, when set, receives each step's loss and token count (for
	// tests and the oracle comparison).
	OnStep func(it int, loss float32, ntoks int)
}

// params returns the adapters' trainable arrays' slots in mlx_lm's
// tree_flatten order.
func (t *Trainer) params() []*backend.Array {
	var out []*backend.Array
	for _, a := range t.Adapters {
		for _, p := range a.Params() {
			out = append(out, p.Array)
		}
	}
	return out
}

func (t *Trainer) setDropout(on bool) {
	for _, a := range t.Adapters {
		if on {
			a.SetDropout(t.Dropout)
		} else {
			a.SetDropout(nil)
		}
	}
}

// Run trains for args.Iters steps over trainSet, validating on valid (if
// it has examples) at step 1, every StepsPerEval steps and at the last,
// reporting every StepsPerReport steps and at the last, and saving the
// adapters to AdapterFile and a numbered copy beside it every
// StepsPerSave steps and at the end.
func (t *Trainer) Run(args Args, trainSet, valid []Example) error {
	if _, ok := t.B.(backend.Differentiator); !ok {
		return fmt.Errorf("train: backend %s has no gradients", t.B.Name())
	}
	if args.GradAccumulationSteps < 1 {
		return fmt.Errorf("train: grad_accumulation_steps must be at least 1")
	}
	if args.Iters < 1 || args.StepsPerReport < 1 || args.StepsPerEval < 1 || args.StepsPerSave < 1 {
		return fmt.Errorf("train: iters %d, steps per report %d, per eval %d and per save %d must be positive", args.Iters, args.StepsPerReport, args.StepsPerEval, args.StepsPerSave)
	}
	batches, err := NewBatches(trainSet, args.BatchSize, args.MaxSeqLength, true, t.RNG, t.Warn)
	if err != nil {
		return fmt.Errorf("%w (training set)", err)
	}
	var (
		losses    float32
		nTokens   int
		steps     int
		trained   int
		trainTime time.Duration
		accum     []backend.Array
	)
	defer t.releaseCompiled()
	t.setDropout(true)
	for it := 1; it <= args.Iters; it++ {
		batch, _ := batches.Next()
		tic := time.Now()
		if len(valid) > 0 && (it == 1 || it%args.StepsPerEval == 0 || it == args.Iters) {
			t.setDropout(false)
			vt := time.Now()
			vl, err := t.Evaluate(valid, args.BatchSize, args.ValBatches, args.MaxSeqLength)
			if err != nil {
				return fmt.Errorf("%w (validation set)", err)
			}
			t.setDropout(true)
			if t.OnVal != nil {
				t.OnVal(ValReport{Iteration: it, ValLoss: vl, ValTime: time.Since(vt)})
			}
			tic = time.Now()
		}
		lv, toks, err := t.step(batch, &accum, it%args.GradAccumulationSteps == 0, args.GradAccumulationSteps)
		if err != nil {
			return fmt.Errorf("train: step %d: %w", it, err)
		}
		if t.OnStep != nil {
			t.OnStep(it, lv, toks)
		}
		losses += lv
		nTokens += toks
		steps++
		trainTime += time.Since(tic)
		if it%args.StepsPerReport == 0 || it == args.Iters {
			lr, err := t.B.ToHost(t.Opt.LearningRate())
			if err != nil {
				return err
			}
			secs := trainTime.Seconds()
			trained += nTokens
			r := Report{
				Iteration:     it,
				TrainLoss:     float64(losses) / float64(steps),
				LearningRate:  lr.ToFloat64()[0],
				ItPerSec:      float64(args.StepsPerReport) / secs,
				TokensPerSec:  float64(nTokens) / secs,
				TrainedTokens: trained,
				PeakMemoryGB:  float64(t.peak()) / 1e9,
			}
			if t.OnReport != nil {
				t.OnReport(r)
			}
			losses, nTokens, steps, trainTime = 0, 0, 0, 0
		}
		if it%args.StepsPerSave == 0 {
			if err := t.save(args.AdapterFile); err != nil {
				return err
			}
			ck := filepath.Join(filepath.Dir(args.AdapterFile), fmt.Sprintf("%07d_adapters.safetensors", it))
			if err := t.save(ck); err != nil {
				return err
			}
			if t.OnSave != nil {
				t.OnSave(it, ck)
			}
		}
	}
	t.B.Release(accum...)
	t.setDropout(false)
	return t.save(args.AdapterFile)
}

func (t *Trainer) peak() int64 {
	if t.PeakMemory != nil {
		return t.PeakMemory()
	}
	return t.B.Stats().PeakBytes
}

func (t *Trainer) save(path string) error {
	if err := lora.SaveWeights(t.B, path, t.Adapters); err != nil {
		return fmt.Errorf("train: %w", err)
	}
	return nil
}

// step is the trainer's step (mlx_lm's compiled step): the loss and its
// gradients w.r.t. every adapter parameter, added to the accumulated
// gradients, and with update the optimizer's step on their mean
// (divided by accumSteps when above 1), after which the accumulation is
// emptied. Through the backend's Compiler when the run allows it
// (compiler), else op by op.
func (t *Trainer) step(batch Batch, accum *[]backend.Array, update bool, accumSteps int) (float32, int, error) {
	var vals []float64
	var err error
	if t.compiler() != nil {
		vals, err = t.compiledStep(batch, accum, update, accumSteps)
	} else {
		vals, err = t.plainStep(batch, accum, update, accumSteps)
	}
	if err != nil {
		return 0, 0, err
	}
	return float32(vals[0]), int(vals[1]), nil
}

// plainStep is step op by op; it returns the loss and the token count.
func (t *Trainer) plainStep(batch Batch, accum *[]backend.Array, update bool, accumSteps int) ([]float64, error) {
	return t.gradStep(func(slots []*backend.Array) ([]backend.Array, []backend.Array, error) {
		return t.valueAndGrad(batch, slots)
	}, accum, update, accumSteps)
}

// gradStep is a step op by op: grad's outputs (the first a scalar
// loss, all scalars) and gradients w.r.t. the arrays in the adapters'
// slots, then descend and finish. It returns the outputs' values.
func (t *Trainer) gradStep(grad func(slots []*backend.Array) (outs, grads []backend.Array, err error), accum *[]backend.Array, update bool, accumSteps int) ([]float64, error) {
	b := t.B
	slots := t.params()
	params := slotValues(slots)
	s := b.Scope()
	defer s.Close()
	outs, grads, err := grad(slots)
	if err != nil {
		return nil, err
	}
	var sc []backend.Array
	if update {
		if sc, err = t.Opt.begin(params, len(grads)); err != nil {
			return nil, err
		}
	}
	next, state, acc := t.descend(params, grads, *accum, t.Opt.state, sc, update, accumSteps)
	return t.finish(s, slots, params, outs, next, state, acc, accum, update)
}

// descend is mlx_lm's step after loss_value_and_grad, on explicit arrays
// (a compiled step traces it): grads plus the accumulated gradients
// accum (nil: none); without update, that sum is the new accumulation;
// with update, the sum over accumSteps (when above 1) is the optimizer's
// gradient, and descend returns the new parameters and state from
// params, state and the step's scalars sc (Optimizer.begin's).
func (t *Trainer) descend(params, grads, accum []backend.Array, state [][]backend.Array, sc []backend.Array, update bool, accumSteps int) (next []backend.Array, nextState [][]backend.Array, nextAccum []backend.Array) {
	b := t.B
	if accum != nil {
		for i := range grads {
			grads[i] = b.Binary(backend.Add, grads[i], accum[i])
		}
	}
	if !update {
		return nil, nil, grads
	}
	if accumSteps > 1 {
		n := b.Full(tensor.Shape{}, float64(accumSteps), grads[0].DType())
		for i := range grads {
			grads[i] = b.Binary(backend.Divide, grads[i], n)
		}
	}
	next, nextState = t.Opt.apply(params, grads, state, sc)
	return next, nextState, nil
}

// finish ends a step in scope s: with update the slots take the new
// parameters next and the optimizer its new state, and the accumulation
// is emptied; without, acc becomes the accumulation. It evaluates them
// with the outputs outs, keeps them past s, releases the old parameters
// params after an update, and returns the outputs' values (scalars).
func (t *Trainer) finish(s backend.Scope, slots []*backend.Array, params, outs, next []backend.Array, state [][]backend.Array, acc []backend.Array, accum *[]backend.Array, update bool) ([]float64, error) {
	b := t.B
	var keep []backend.Array
	b.Release(*accum...)
	*accum = nil
	if update {
		t.Opt.commit(state)
		for i, sl := range slots {
			*sl = next[i]
		}
		keep = append(keep, next...)
		keep = append(keep, t.Opt.State()...)
	} else {
		*accum = acc
		keep = append(keep, acc...)
	}
	if err := b.Eval(append(keep, outs...)...); err != nil {
		return nil, err
	}
	vals := make([]float64, len(outs))
	for i, o := range outs {
		h, err := b.ToHost(o)
		if err != nil {
			return nil, err
		}
		vals[i] = h.ToFloat64()[0]
	}
	s.Keep(keep...)
	if update {
		b.Release(params...)
	}
	return vals, nil
}

// slotValues returns the arrays the slots hold.
func slotValues(slots []*backend.Array) []backend.Array {
	out := make([]backend.Array, len(slots))
	for i, s := range slots {
		out[i] = *s
	}
	return out
}

// valueAndGrad returns the loss and its token count on batch, and the
// loss's gradient with respect to each slot's array (leaving the slots
// as they were): through Differentiator.ValueAndGrad, or segmented.
func (t *Trainer) valueAndGrad(batch Batch, slots []*backend.Array) ([]backend.Array, []backend.Array, error) {
	if t.SegmentLayers > 0 {
		return t.segmentedGrad(batch, slots)
	}
	b := t.B
	return t.gradOf(slots, slotValues(slots), func() ([]backend.Array, error) {
		fo := t.forwardOptions()
		if t.LossChunk > 0 {
			l, n, err := chunkedLoss(b, t.Model, batch, fo.Block, t.LossChunk)
			return []backend.Array{l, n}, err
		}
		l, n, err := lossWith(b, t.Model, batch, fo)
		return []backend.Array{l, n}, err
	})
}

// forwardOptions are the training forward's options: each block
// checkpointed with GradCheckpoint.
func (t *Trainer) forwardOptions() minicpm5.ForwardOptions {
	var fo minicpm5.ForwardOptions
	if t.GradCheckpoint {
		fo.Block = t.checkpointed
	}
	return fo
}

// gradOf is Differentiator.ValueAndGrad of loss with respect to params,
// one per slot: while loss runs the slots hold the transform's inputs
// (so the adapters read them), and afterwards what they held before.
func (t *Trainer) gradOf(slots []*backend.Array, params []backend.Array, loss func() ([]backend.Array, error)) ([]backend.Array, []backend.Array, error) {
	d := t.B.(backend.Differentiator)
	saved := slotValues(slots)
	defer func() {
		for i, s := range slots {
			*s = saved[i]
		}
	}()
	all := make([]int, len(slots))
	for i := range all {
		all[i] = i
	}
	return d.ValueAndGrad(func(x []backend.Array) ([]backend.Array, error) {
		for i, s := range slots {
			*s = x[i]
		}
		return loss()
	}, params, all)
}

// checkpointed runs block i through Differentiator.Checkpoint with h
// and the block's adapter arrays as the checkpointed function's inputs,
// so that their gradients flow through the recomputation.
func (t *Trainer) checkpointed(i int, block *minicpm5.Block, h backend.Array, mask backend.Mask) backend.Array {
	d := t.B.(backend.Differentiator)
	prefix := fmt.Sprintf("model.layers.%d.", i)
	var slots []*backend.Array
	for _, a := range t.Adapters {
		if strings.HasPrefix(a.Path, prefix) {
			for _, p := range a.Params() {
				slots = append(slots, p.Array)
			}
		}
	}
	outer := make([]backend.Array, len(slots))
	for k, s := range slots {
		outer[k] = *s
	}
	var keys [][2]uint32
	calls := 0
	fn := d.Checkpoint(func(in []backend.Array) ([]backend.Array, error) {
		if t.keys != nil {
			// The first run (the forward) draws the dropout keys from the
			// RNG as an uncheckpointed block would and records them; a
			// recomputation replays them, so it draws the same masks.
			if calls == 0 {
				t.keys.rec = &keys
			} else {
				t.keys.replay, t.keys.replaying = keys, true
			}
			defer t.keys.reset()
		}
		calls++
		for k, s := range slots {
			*s = in[1+k]
		}
		return []backend.Array{block.Forward(in[0], mask, nil)}, nil
	})
	out, err := fn(append([]backend.Array{h}, outer...))
	for k, s := range slots {
		*s = outer[k]
	}
	if err != nil {
		panic(&backend.OpError{Op: "Checkpoint", Err: err})
	}
	return out[0]
}

// Evaluate is mlx_lm's evaluate: the token-weighted mean of the loss over
// numBatches batches of set (-1: all of them), in one non-looping pass of
// iterate_batches (which draws its order from the trainer's RNG), the
// sums in float32 as mlx_lm keeps them.
func (t *Trainer) Evaluate(set []Example, batchSize, numBatches, maxSeq int) (float64, error) {
	it, err := NewBatches(set, batchSize, maxSeq, false, t.RNG, t.Warn)
	if err != nil {
		return 0, err
	}
	var all float32
	var ntok int32
	for k := 0; numBatches == -1 || k < numBatches; k++ {
		batch, ok := it.Next()
		if !ok {
			break
		}
		l, n, err := t.lossOnly(batch)
		if err != nil {
			return 0, err
		}
		all += float32(l * float32(n))
		ntok += int32(n)
	}
	return float64(all / float32(ntok)), nil
}

func (t *Trainer) lossOnly(batch Batch) (float32, int, error) {
	s := t.B.Scope()
	defer s.Close()
	var l, n backend.Array
	var err error
	if t.LossChunk > 0 {
		l, n, err = chunkedLoss(t.B, t.Model, batch, nil, t.LossChunk)
	} else {
		l, n, err = Loss(t.B, t.Model, batch)
	}
	if err != nil {
		return 0, 0, err
	}
	lv, err := t.B.ToHost(l)
	if err != nil {
		return 0, 0, err
	}
	nv, err := t.B.ToHost(n)
	if err != nil {
		return 0, 0, err
	}
	return float32(lv.ToFloat64()[0]), int(nv.ToFloat64()[0]), nil
}

// dropoutKeys hands out the dropout masks' keys (mx.random's sequence
// after mx.random.seed): drawn from rng in order, appended to *rec while a
// checkpointed block's forward records them, or taken from replay while
// that block is recomputed in the backward. The masks of a checkpointed
// step are thus those of the same step without checkpointing. (MLX's own
// mx.checkpoint draws new keys in the recomputation: with mlx 0.32.4,
// mx.grad(mx.checkpoint(f)) of f(x) = sum(bernoulli(0.5)·x) after
// mx.random.seed(0) is the second draw's mask, not the forward's. So
// mlx_lm's checkpointed gradients with dropout follow masks its forward
// did not use; ours do not.)
//
// A compiled step (compiled.go) draws its masks on the host before the
// call and passes them in; while its function is traced, masks holds
// them and the "keys" handed out are their indices (drawn counting), so
// that a recomputed block replays the same masks.
type dropoutKeys struct {
	rng       *generate.RNG
	p         float64
	rec       *[][2]uint32
	replay    [][2]uint32
	replaying bool
	// shapes, when set, receives the shape of each mask drawn (not
	// replayed): the masks a compiled step of the batch's shape takes.
	shapes *[]tensor.Shape
	masks  []backend.Array
	drawn  uint32
	// viaMask says the trainer's Dropout takes its masks from mask
	// (setup's), so that a compiled step can hand them in.
	viaMask bool
}

func (k *dropoutKeys) next() [2]uint32 {
	if k.replaying {
		if len(k.replay) == 0 {
			panic("train: a recomputed checkpointed block drew more dropout keys than its forward")
		}
		key := k.replay[0]
		k.replay = k.replay[1:]
		return key
	}
	var key [2]uint32
	if k.masks != nil {
		key = [2]uint32{k.drawn, 0}
		k.drawn++
	} else {
		key = k.rng.Next()
	}
	if k.rec != nil {
		*k.rec = append(*k.rec, key)
	}
	return key
}

// mask is the keep mask of shape s of the next dropout call
// (lora.DropoutMasks): drawn from the next key, or, while a compiled
// step is traced, the step's input mask the key indexes.
func (k *dropoutKeys) mask(b backend.Backend, s tensor.Shape) backend.Array {
	replayed := k.replaying
	key := k.next()
	if k.masks != nil {
		if int(key[0]) >= len(k.masks) || !slices.Equal(k.masks[key[0]].Shape(), s) {
			panic(&backend.OpError{Op: "dropout", Err: fmt.Errorf("train: a compiled step's dropout mask %d of %v is not the %d masks its first step drew", key[0], s, len(k.masks))})
		}
		return k.masks[key[0]]
	}
	if k.shapes != nil && !replayed {
		*k.shapes = append(*k.shapes, s)
	}
	return lora.KeepMask(b, k.p, key, s)
}

// reset ends a recording or a replay.
func (k *dropoutKeys) reset() { k.rec, k.replay, k.replaying = nil, nil, false }
