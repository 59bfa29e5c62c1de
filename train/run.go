package train

import (
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/lora"
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/tensor"
)

// RunLoRA is mlx_lm.lora's run(): with c.Train it puts adapters on the
// model (mx.random.seed(c.Seed) first, so they are mlx_lm's), resumes
// from c.ResumeAdapterFile, writes c.AdapterPath/adapter_config.json,
// and trains; with c.Test (alone, the adapters of c.AdapterPath if set)
// it prints the test set's loss and perplexity. Progress lines go to
// out, in mlx_lm's words; warnings to warn. m is c.Model loaded on b,
// text its tokenizer; peak, when not nil, is the device's peak memory in
// bytes for the progress lines (see Trainer.PeakMemory).
func RunLoRA(b backend.Backend, m *minicpm5.Model, text *chat.Text, c Config, out, warn io.Writer, peak func() int64) error {
	if !c.Train && !c.Test {
		return errors.New("train: must provide at least one of --train or --test")
	}
	if err := c.Check(); err != nil {
		return err
	}
	switch c.Loss {
	case "", "default":
	case "orpo":
		if c.SegmentLayers != 0 || c.TrainMemoryBudget != "" || c.LossChunk != 0 {
			return errors.New("train: --loss orpo does not take --segment-layers, --train-memory-budget or --loss-chunk (the segmented backward and the chunked loss are the default loss's)")
		}
		return runORPO(b, m, text, c, out, warn, peak)
	default:
		return fmt.Errorf("train: --loss %q: want default (mlx_lm's cross-entropy) or orpo", c.Loss)
	}
	rng := NewNumpyRNG(uint32(c.Seed))
	fmt.Fprintln(out, "Loading datasets")
	trainSet, valid, test, err := LoadDir(c.Data, text, DataOptions{MaskPrompt: c.MaskPrompt,
		TextFeature: c.TextFeature, PromptFeature: c.PromptFeature, CompletionFeature: c.CompletionFeature, ChatFeature: c.ChatFeature})
	if err != nil {
		return err
	}
	if c.Train && len(trainSet) == 0 {
		return fmt.Errorf("train: %s: training set not found or empty (train.jsonl); must provide a training set for fine-tuning", c.Data)
	}
	if c.Train && len(valid) == 0 {
		fmt.Fprintln(warn, "Warning: Validation set not found or empty. Training will proceed without validation.")
	}
	if c.Test && len(test) == 0 {
		return fmt.Errorf("train: %s: test set not found or empty (test.jsonl); must provide a test set for evaluation", c.Data)
	}
	t := &Trainer{B: b, Model: m, RNG: rng, Warn: warn, GradCheckpoint: c.GradCheckpoint, PeakMemory: peak, LossChunk: c.LossChunk, NoCompile: c.NoCompile}
	if c.LossChunk < 0 {
		return fmt.Errorf("train: --loss-chunk %d: want a positive number of rows (or 0)", c.LossChunk)
	}
	switch {
	case c.Train:
		fmt.Fprintln(out, "Training")
		if err := trainLoRA(t, c, trainSet, valid, out); err != nil {
			return err
		}
	case c.AdapterPath != "":
		ads, _, err := lora.Load(b, m, c.AdapterPath)
		if err != nil {
			return err
		}
		t.Adapters = ads
	}
	if c.Test {
		fmt.Fprintln(out, "Testing")
		loss, err := t.Evaluate(test, c.BatchSize, c.TestBatches, c.MaxSeqLength)
		if err != nil {
			return fmt.Errorf("%w (test set)", err)
		}
		fmt.Fprintf(out, "Test loss %.3f, Test ppl %.3f.\n", loss, math.Exp(loss))
	}
	return nil
}

// trainLoRA is mlx_lm.lora's train_model.
func trainLoRA(t *Trainer, c Config, trainSet, valid []Example, out io.Writer) error {
	if err := setup(t, c, out); err != nil {
		return err
	}
	n := 0
	for _, a := range t.Adapters {
		for _, p := range a.Params() {
			n += (*p.Array).Shape().Size()
		}
	}
	fmt.Fprintf(out, "Trainable parameters: %.3fM in %d adapted layers\n", float64(n)/1e6, len(t.Adapters))
	cfg := lora.Config{FineTuneType: c.FineTuneType, NumLayers: c.NumLayers, LoRA: c.LoRAParameters}
	extra := map[string]any{
		"model": c.Model, "data": c.Data, "seed": c.Seed, "optimizer": c.Optimizer, "batch_size": c.BatchSize,
		"iters": c.Iters, "val_batches": c.ValBatches, "learning_rate": c.LearningRate, "steps_per_report": c.StepsPerReport,
		"steps_per_eval": c.StepsPerEval, "save_every": c.SaveEvery, "adapter_path": c.AdapterPath, "max_seq_length": c.MaxSeqLength,
		"grad_checkpoint": c.GradCheckpoint, "grad_accumulation_steps": c.GradAccumulationSteps, "mask_prompt": c.MaskPrompt,
		"lr_schedule": c.LRSchedule, "resume_adapter_file": nilIfEmpty(c.ResumeAdapterFile), "train": c.Train, "test": c.Test,
		"test_batches": c.TestBatches,
	}
	if err := lora.SaveConfig(c.AdapterPath, cfg, extra); err != nil {
		return err
	}
	adapterFile := filepath.Join(c.AdapterPath, lora.WeightsFile)
	t.OnVal = func(v ValReport) {
		fmt.Fprintf(out, "Iter %d: Val loss %.3f, Val took %.3fs\n", v.Iteration, v.ValLoss, v.ValTime.Seconds())
	}
	t.OnReport = func(r Report) {
		fmt.Fprintf(out, "Iter %d: Train loss %.3f, Learning Rate %.3e, It/sec %.3f, Tokens/sec %.3f, Trained Tokens %d, Peak mem %.3f GB\n",
			r.Iteration, r.TrainLoss, r.LearningRate, r.ItPerSec, r.TokensPerSec, r.TrainedTokens, r.PeakMemoryGB)
	}
	t.OnSave = func(it int, path string) {
		fmt.Fprintf(out, "Iter %d: Saved adapter weights to %s and %s.\n", it, adapterFile, path)
	}
	start := time.Now()
	err := t.Run(Args{BatchSize: c.BatchSize, Iters: c.Iters, ValBatches: c.ValBatches, StepsPerReport: c.StepsPerReport,
		StepsPerEval: c.StepsPerEval, StepsPerSave: c.SaveEvery, MaxSeqLength: c.MaxSeqLength, AdapterFile: adapterFile,
		GradAccumulationSteps: c.GradAccumulationSteps}, trainSet, valid)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "Saved final weights to %s (%d steps in %.1f s).\n", adapterFile, c.Iters, time.Since(start).Seconds())
	return nil
}

// setup is train_model up to the training: mx.random.seed(c.Seed), the
// adapters (LoRA or DoRA, mlx_lm's initial values), their dropout from
// the same random sequence, c.ResumeAdapterFile's weights, and the
// optimizer with its schedule and optimizer_config.
func setup(t *Trainer, c Config, out io.Writer) error {
	b, m := t.B, t.Model
	mxRNG := generate.NewRNG(uint64(c.Seed))
	if c.NumLayers > len(m.Layers) {
		return fmt.Errorf("train: requested to train %d layers but the model only has %d layers", c.NumLayers, len(m.Layers))
	}
	var err error
	switch c.FineTuneType {
	case "lora":
		t.Adapters, err = lora.Apply(b, m, c.NumLayers, c.LoRAParameters, mxRNG)
	case "dora":
		t.Adapters, err = lora.ApplyDoRA(b, m, c.NumLayers, c.LoRAParameters, mxRNG)
	default:
		err = fmt.Errorf("train: fine_tune_type %q: only lora and dora are implemented", c.FineTuneType)
	}
	if err != nil {
		return err
	}
	if c.LoRAParameters.Dropout > 0 {
		t.keys = &dropoutKeys{rng: mxRNG, p: c.LoRAParameters.Dropout, viaMask: true}
		if t.Dropout, err = lora.DropoutMasks(b, c.LoRAParameters.Dropout, func(s tensor.Shape) backend.Array { return t.keys.mask(b, s) }); err != nil {
			return err
		}
	}
	if err := planSegments(t, c, out); err != nil {
		return err
	}
	if c.ResumeAdapterFile != "" {
		fmt.Fprintf(out, "Loading fine-tuned weights from %s\n", c.ResumeAdapterFile)
		if _, err := lora.LoadWeights(b, c.ResumeAdapterFile, t.Adapters); err != nil {
			return err
		}
	}
	sched := Constant(c.LearningRate)
	if c.LRSchedule != nil {
		sched = *c.LRSchedule
	}
	ocfg, err := c.optimizerConfig(c.Optimizer)
	if err != nil {
		return err
	}
	t.Opt, err = NewOptimizer(b, c.Optimizer, sched, ocfg)
	return err
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}
