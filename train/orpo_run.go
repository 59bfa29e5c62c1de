package train

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
)

// ORPOArgs are the ORPO options of a training run.
type ORPOArgs struct {
	Lambda float64 // λ, DefaultORPOLambda by default
	// TwoForwards reads each pair as two forwards, [prompt | chosen] and
	// [prompt | rejected], instead of one prefix-shared forward.
	TwoForwards bool
	// DenseAttention makes the prefix-shared forward attend under the
	// plain Bool mask array instead of the blocked PrefixMask.
	DenseAttention bool
}

// forward is how ORPOLoss reads the pairs under o.
func (o ORPOArgs) forward() PairForward {
	switch {
	case o.TwoForwards:
		return TwoForwards
	case o.DenseAttention:
		return SharedDense
	}
	return Shared
}

// ParseORPOAttention maps --orpo-attention's value ("" is the default)
// to ORPOArgs.DenseAttention.
func ParseORPOAttention(s string) (dense bool, err error) {
	switch s {
	case "", "blocked":
		return false, nil
	case "dense":
		return true, nil
	}
	return false, fmt.Errorf("train: --orpo-attention %q: want blocked or dense", s)
}

// ORPOReport is one ORPO training report: the means over the steps since
// the last report of the loss, the log-odds ratio and ℓ_w and ℓ_l, with
// Report's rates (a pair's tokens are its prompt's and both responses',
// P+Rc+Rr, however many forwards read them).
type ORPOReport struct {
	Report
	LogOdds, ChosenLogP, RejectedLogP float64
}

// ORPOValReport is one ORPO validation: the means over the validation
// pairs.
type ORPOValReport struct {
	ValReport
	LogOdds float64
}

// orpoStep is the trainer's step on an ORPO batch: the loss's gradients
// w.r.t. every adapter parameter and the optimizer's update. It returns
// the loss, the mean log-odds ratio, ℓ_w and ℓ_l.
func (t *Trainer) orpoStep(pairs []Pair, o ORPOArgs) ([4]float64, error) {
	var accum []backend.Array
	fo := t.forwardOptions()
	vals, err := t.gradStep(func(slots []*backend.Array) ([]backend.Array, []backend.Array, error) {
		return t.gradOf(slots, slotValues(slots), func() ([]backend.Array, error) {
			v, err := ORPOLoss(t.B, t.Model, pairs, o.Lambda, o.forward(), fo)
			return v.Arrays(), err
		})
	}, &accum, true, 1)
	if err != nil {
		return [4]float64{}, err
	}
	return [4]float64(vals), nil
}

func hostScalars(b backend.Backend, xs []backend.Array) ([4]float64, error) {
	var out [4]float64
	for i := range out {
		h, err := b.ToHost(xs[i])
		if err != nil {
			return out, err
		}
		out[i] = h.ToFloat64()[0]
	}
	return out, nil
}

// orpoEval is the ORPO loss and log-odds ratio over set, in batches of
// batchSize (the last one shorter), without gradients.
func (t *Trainer) orpoEval(set []Pair, batchSize int, o ORPOArgs) (loss, logOdds float64, err error) {
	for i := 0; i < len(set); i += batchSize {
		batch := set[i:min(i+batchSize, len(set))]
		s := t.B.Scope()
		v, err := ORPOLoss(t.B, t.Model, batch, o.Lambda, o.forward(), minicpm5.ForwardOptions{})
		if err != nil {
			s.Close()
			return 0, 0, err
		}
		vals, err := hostScalars(t.B, v.Arrays())
		s.Close()
		if err != nil {
			return 0, 0, err
		}
		loss += vals[0] * float64(len(batch))
		logOdds += vals[1] * float64(len(batch))
	}
	return loss / float64(len(set)), logOdds / float64(len(set)), nil
}

// RunORPO trains the adapters with the ORPO loss for args.Iters steps of
// args.BatchSize pairs: each epoch visits the training pairs in the order
// of a permutation drawn from t.RNG, in consecutive batches (a remainder
// is dropped). It validates on valid (all of it, when not empty) at step
// 1, every StepsPerEval steps and at the last, reports every
// StepsPerReport steps and at the last, and saves the adapters as Run
// does. Gradient accumulation is not implemented; gradient
// checkpointing only with TwoForwards.
func (t *Trainer) RunORPO(args Args, o ORPOArgs, trainSet, valid []Pair, onReport func(ORPOReport), onVal func(ORPOValReport)) error {
	if _, ok := t.B.(backend.Differentiator); !ok {
		return fmt.Errorf("train: backend %s has no gradients", t.B.Name())
	}
	switch {
	case args.GradAccumulationSteps != 1:
		return fmt.Errorf("train: --grad-accumulation-steps %d with --loss orpo is not implemented (want 1)", args.GradAccumulationSteps)
	case t.GradCheckpoint && !o.TwoForwards:
		return fmt.Errorf("train: --grad-checkpoint with the prefix-shared ORPO forward is not implemented (add --orpo-two-forwards)")
	case args.Iters < 1 || args.StepsPerReport < 1 || args.StepsPerEval < 1 || args.StepsPerSave < 1:
		return fmt.Errorf("train: iters %d, steps per report %d, per eval %d and per save %d must be positive", args.Iters, args.StepsPerReport, args.StepsPerEval, args.StepsPerSave)
	case args.BatchSize < 1 || len(trainSet) < args.BatchSize:
		return fmt.Errorf("train: dataset must have at least batch_size=%d preference pairs but only has %d", args.BatchSize, len(trainSet))
	}
	var order []int
	pos := 0
	next := func() []Pair {
		if order == nil || pos+args.BatchSize > len(order) {
			order, pos = t.RNG.Permutation(len(trainSet)), 0
		}
		out := make([]Pair, args.BatchSize)
		for i := range out {
			out[i] = trainSet[order[pos+i]]
		}
		pos += args.BatchSize
		return out
	}
	var sums [4]float64
	var steps, nTokens, trained int
	var trainTime time.Duration
	t.setDropout(true)
	for it := 1; it <= args.Iters; it++ {
		batch := next()
		if len(valid) > 0 && (it == 1 || it%args.StepsPerEval == 0 || it == args.Iters) {
			t.setDropout(false)
			vt := time.Now()
			vl, vo, err := t.orpoEval(valid, args.BatchSize, o)
			if err != nil {
				return fmt.Errorf("%w (validation set)", err)
			}
			t.setDropout(true)
			if onVal != nil {
				onVal(ORPOValReport{ValReport{Iteration: it, ValLoss: vl, ValTime: time.Since(vt)}, vo})
			}
		}
		tic := time.Now()
		vals, err := t.orpoStep(batch, o)
		if err != nil {
			return fmt.Errorf("train: step %d: %w", it, err)
		}
		trainTime += time.Since(tic)
		if t.OnStep != nil {
			t.OnStep(it, float32(vals[0]), 0)
		}
		for i := range sums {
			sums[i] += vals[i]
		}
		for _, p := range batch {
			nTokens += p.Layout().T()
		}
		steps++
		if it%args.StepsPerReport == 0 || it == args.Iters {
			lr, err := t.B.ToHost(t.Opt.LearningRate())
			if err != nil {
				return err
			}
			secs := trainTime.Seconds()
			trained += nTokens
			n := float64(steps)
			if onReport != nil {
				onReport(ORPOReport{Report: Report{Iteration: it, TrainLoss: sums[0] / n, LearningRate: lr.ToFloat64()[0],
					ItPerSec: n / secs, TokensPerSec: float64(nTokens) / secs, TrainedTokens: trained, PeakMemoryGB: float64(t.peak()) / 1e9},
					LogOdds: sums[1] / n, ChosenLogP: sums[2] / n, RejectedLogP: sums[3] / n})
			}
			sums, steps, nTokens, trainTime = [4]float64{}, 0, 0, 0
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
	t.setDropout(false)
	return t.save(args.AdapterFile)
}

// runORPO is RunLoRA with --loss orpo: preference pairs from c.Data
// (LoadPreferenceDir), the adapters, optimizer and schedule of setup,
// RunORPO with progress lines naming the ORPO loss and the log-odds
// ratio, and with c.Test the test set's ORPO loss.
func runORPO(b backend.Backend, m *minicpm5.Model, text *chat.Text, c Config, out, warn io.Writer, peak func() int64) error {
	if !(c.ORPOLambda >= 0) || math.IsInf(c.ORPOLambda, 0) {
		return fmt.Errorf("train: --orpo-lambda %v: want a finite number ≥ 0", c.ORPOLambda)
	}
	if c.MaskPrompt {
		fmt.Fprintln(warn, "Warning: --mask-prompt has no effect with --loss orpo: ORPO's log-probabilities never count the prompt.")
	}
	dense, err := ParseORPOAttention(c.ORPOAttention)
	if err != nil {
		return err
	}
	if dense && c.ORPOTwoForwards {
		return fmt.Errorf("train: --orpo-attention dense applies to the prefix-shared forward, not to --orpo-two-forwards")
	}
	o := ORPOArgs{Lambda: c.ORPOLambda, TwoForwards: c.ORPOTwoForwards, DenseAttention: dense}
	fmt.Fprintln(out, "Loading datasets")
	trainSet, valid, test, err := LoadPreferenceDir(c.Data, text, c.MaxSeqLength)
	if err != nil {
		return err
	}
	if c.Train && len(trainSet) == 0 {
		return fmt.Errorf("train: %s: training set not found or empty (train.jsonl); must provide preference pairs for --loss orpo", c.Data)
	}
	if c.Train && len(valid) == 0 {
		fmt.Fprintln(warn, "Warning: Validation set not found or empty. Training will proceed without validation.")
	}
	if c.Test && len(test) == 0 {
		return fmt.Errorf("train: %s: test set not found or empty (test.jsonl); must provide a test set for evaluation", c.Data)
	}
	t := &Trainer{B: b, Model: m, RNG: NewNumpyRNG(uint32(c.Seed)), Warn: warn, GradCheckpoint: c.GradCheckpoint, PeakMemory: peak}
	switch {
	case c.Train:
		fmt.Fprintf(out, "Training with ORPO (λ %g, %s)\n", o.Lambda, map[bool]string{false: "prefix-shared: one forward per pair", true: "two forwards per pair"}[o.TwoForwards])
		if err := setup(t, c, out); err != nil {
			return err
		}
		// adapter_config.json: the adapters' configuration and every
		// option of the run, under Config's names.
		raw, err := json.Marshal(c)
		if err != nil {
			return err
		}
		extra := map[string]any{}
		if err := json.Unmarshal(raw, &extra); err != nil {
			return err
		}
		for _, k := range []string{"fine_tune_type", "num_layers", "lora_parameters"} {
			delete(extra, k)
		}
		if err := lora.SaveConfig(c.AdapterPath, lora.Config{FineTuneType: c.FineTuneType, NumLayers: c.NumLayers, LoRA: c.LoRAParameters}, extra); err != nil {
			return err
		}
		adapterFile := filepath.Join(c.AdapterPath, lora.WeightsFile)
		t.OnSave = func(it int, path string) {
			fmt.Fprintf(out, "Iter %d: Saved adapter weights to %s and %s.\n", it, adapterFile, path)
		}
		start := time.Now()
		err = t.RunORPO(Args{BatchSize: c.BatchSize, Iters: c.Iters, StepsPerReport: c.StepsPerReport, StepsPerEval: c.StepsPerEval,
			StepsPerSave: c.SaveEvery, MaxSeqLength: c.MaxSeqLength, AdapterFile: adapterFile, GradAccumulationSteps: c.GradAccumulationSteps},
			o, trainSet, valid,
			func(r ORPOReport) {
				fmt.Fprintf(out, "Iter %d: Train loss %.3f, Log-odds ratio %.3f, Chosen logp %.3f, Rejected logp %.3f, Learning Rate %.3e, It/sec %.3f, Tokens/sec %.3f, Trained Tokens %d, Peak mem %.3f GB\n",
					r.Iteration, r.TrainLoss, r.LogOdds, r.ChosenLogP, r.RejectedLogP, r.LearningRate, r.ItPerSec, r.TokensPerSec, r.TrainedTokens, r.PeakMemoryGB)
			},
			func(v ORPOValReport) {
				fmt.Fprintf(out, "Iter %d: Val loss %.3f, Val log-odds ratio %.3f, Val took %.3fs\n", v.Iteration, v.ValLoss, v.LogOdds, v.ValTime.Seconds())
			})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "Saved final weights to %s (%d steps in %.1f s).\n", adapterFile, c.Iters, time.Since(start).Seconds())
	case c.AdapterPath != "":
		ads, _, err := lora.Load(b, m, c.AdapterPath)
		if err != nil {
			return err
		}
		t.Adapters = ads
	}
	if c.Test {
		fmt.Fprintln(out, "Testing")
		loss, lor, err := t.orpoEval(test, c.BatchSize, o)
		if err != nil {
			return fmt.Errorf("%w (test set)", err)
		}
		fmt.Fprintf(out, "Test loss %.3f, Test log-odds ratio %.3f.\n", loss, lor)
	}
	return nil
}
