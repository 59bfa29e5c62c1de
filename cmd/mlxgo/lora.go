package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/train"
)

const loraUsage = `usage: mlxgo lora --model DIR --train --data DIR [flags]
       mlxgo lora --model DIR --test --data DIR --adapter-path DIR
       mlxgo lora -c config.yaml [flags]

Fine-tunes LoRA (or DoRA) adapters as mlx_lm.lora does, with its flags,
config file and files: --data is a directory of train.jsonl, valid.jsonl
and test.jsonl, one JSON object a line in mlx_lm's formats ({"text"},
{"prompt","completion"} or {"messages"}, the last two through the chat
template); the adapters are mlx_lm's (the same layers and initial values
for a seed), trained with mlx_lm's batches, loss, optimizer and schedule,
and saved to --adapter-path as adapters.safetensors and
adapter_config.json, which mlx_lm and mlxgo --adapter-path load.
-c reads a YAML file of mlx_lm.lora's options (flags given on the
command line win; the others default as mlx_lm's). Progress lines name
the training loss, learning rate, it/s, tokens/s and peak memory.

Memory: --segment-layers N trains with a segmented backward: the forward
keeps only the residual stream at every N-th adapted layer, and the
backward recomputes each range of N layers from its boundary and
backpropagates through it (the gradients are the plain backward's bit for
bit; about one more forward of compute). --train-memory-budget BYTES picks
N instead: the largest N whose estimated activation memory (weights,
adapters and optimizer state not counted) at --batch-size rows of
--max-seq-length tokens fits in BYTES, the estimate being, in float32,
  (⌈adapted/N⌉ + 2)·B·T·hidden                       boundary states
  + N·B·T·(12·hidden + 7·(heads+2·kv_heads)·head_dim + 9·intermediate)
                                                     one segment's layers
  + 10·B·heads·T²                                    one attention backward
  + 6·chunk·vocab                                    one loss chunk
(times 4 bytes; it errs when N = 1 does not fit). Segmenting, the loss is
computed through the head --loss-chunk rows at a time (default 2^24/vocab
rows: no [tokens, vocab] logits at once, the same loss bit for bit);
without segments --loss-chunk is off by default (mlx_lm's full-logits
loss, whose graph the oracle fixtures match). Segments go with neither
--grad-checkpoint nor LoRA dropout (a recomputed range would draw new
masks).

--loss orpo trains on preference pairs instead: one JSON object a line,
{"prompt", "chosen", "rejected"} as strings (with an optional "system")
or as chat messages, through the chat template. The loss is ORPO's
(Hong, Lee and Thorne 2024): −ℓ_w + λ·softplus(−logOR), ℓ the mean
log-probability of a response's tokens, λ = --orpo-lambda (0.1); each
pair is one forward of [prompt | chosen | rejected] with the prompt
shared (--orpo-two-forwards reads it as two), its attention blocked
(no work for the keys the mask hides; --orpo-attention dense attends
under the plain [T, T] mask array). Progress lines add the log-odds
ratio. (mlx-lm-lora's "ORPO" is another formula, not matched.)

Examples:
  mlxgo lora --model smollm2-mlx --train --data data --iters 50 --num-layers 8
  mlxgo lora --model smollm2-mlx --train --data data --max-seq-length 4096 --train-memory-budget 8G
  mlxgo lora --model smollm2-mlx --test --data data --adapter-path adapters
  mlxgo lora --model smollm2-mlx --train --loss orpo --data train/testdata/preference --iters 50
  mlxgo generate --model smollm2-mlx --adapter-path adapters --prompt "Hello"

Flags:
`

// devicePeakMemory, set when the MLX backend is compiled in (mlx.go),
// returns a reader of MLX's allocator peak for b, or nil for another
// backend.
var devicePeakMemory func(b backend.Backend) func() int64

func cmdLoRA(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("lora", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	d := train.Defaults()
	var c train.Config
	fs.StringVar(&c.Model, "model", "", "model directory (config.json, model*.safetensors, tokenizer.json); required")
	fs.BoolVar(&c.Train, "train", false, "train adapters")
	fs.StringVar(&c.Data, "data", d.Data, "directory with train.jsonl, valid.jsonl, test.jsonl")
	fs.StringVar(&c.FineTuneType, "fine-tune-type", d.FineTuneType, "lora or dora")
	fs.StringVar(&c.Optimizer, "optimizer", d.Optimizer, "adam, adamw or sgd")
	fs.BoolVar(&c.MaskPrompt, "mask-prompt", false, "leave the prompt out of the loss (prompt/completion and chat data)")
	fs.IntVar(&c.NumLayers, "num-layers", d.NumLayers, "number of (last) layers to adapt; -1 for all")
	fs.IntVar(&c.BatchSize, "batch-size", d.BatchSize, "minibatch size")
	fs.IntVar(&c.Iters, "iters", d.Iters, "iterations to train for")
	fs.IntVar(&c.ValBatches, "val-batches", d.ValBatches, "validation batches; -1 for the whole validation set")
	fs.Float64Var(&c.LearningRate, "learning-rate", d.LearningRate, "learning rate (without an lr_schedule)")
	fs.IntVar(&c.StepsPerReport, "steps-per-report", d.StepsPerReport, "training steps between loss reports")
	fs.IntVar(&c.StepsPerEval, "steps-per-eval", d.StepsPerEval, "training steps between validations")
	fs.IntVar(&c.GradAccumulationSteps, "grad-accumulation-steps", d.GradAccumulationSteps, "steps whose gradients are accumulated before each update")
	fs.StringVar(&c.ResumeAdapterFile, "resume-adapter-file", "", "adapters.safetensors to resume training from")
	fs.StringVar(&c.AdapterPath, "adapter-path", d.AdapterPath, "directory to save the adapters to (or, with --test alone, to load them from)")
	fs.IntVar(&c.SaveEvery, "save-every", d.SaveEvery, "save the adapters every N iterations")
	fs.BoolVar(&c.Test, "test", false, "evaluate on the test set (after training, with --train)")
	fs.IntVar(&c.TestBatches, "test-batches", d.TestBatches, "test batches; -1 for the whole test set")
	fs.IntVar(&c.MaxSeqLength, "max-seq-length", d.MaxSeqLength, "maximum sequence length (longer ones are truncated with a warning)")
	fs.BoolVar(&c.GradCheckpoint, "grad-checkpoint", false, "gradient checkpointing: recompute each block in the backward (less memory, more compute)")
	fs.IntVar(&c.SegmentLayers, "segment-layers", 0, "segmented backward: run the layers in ranges of `N`, keep only the ranges' boundary states, recompute each range in the backward (gradients bit for bit the plain backward's)")
	fs.StringVar(&c.TrainMemoryBudget, "train-memory-budget", "", "segmented backward with the largest segment size whose estimated activation memory fits in `BYTES` (a number, or with K, M or G: powers of 1024); see below")
	fs.IntVar(&c.LossChunk, "loss-chunk", 0, "compute the loss through the head `ROWS` token rows at a time (the same value bit for bit, no [tokens, vocab] logits); 0: the full logits, or 2^24/vocab rows when segmenting")
	fs.BoolVar(&c.NoCompile, "no-compile", false, "run each training step op by op instead of compiled as mlx_lm compiles it (the mlx backend compiles the default loss's steps without segments or --loss-chunk)")
	fs.IntVar(&c.Seed, "seed", d.Seed, "the random seed (adapters' initial values, batch order, dropout)")
	fs.StringVar(&c.Loss, "loss", d.Loss, "default (mlx_lm's cross-entropy) or orpo (preference pairs: prompt, chosen, rejected)")
	fs.Float64Var(&c.ORPOLambda, "orpo-lambda", d.ORPOLambda, "ORPO's λ, the weight of the odds-ratio term")
	fs.BoolVar(&c.ORPOTwoForwards, "orpo-two-forwards", false, "ORPO: read each pair as two forwards instead of one prefix-shared forward")
	fs.StringVar(&c.ORPOAttention, "orpo-attention", "blocked", "ORPO: the prefix-shared forward's attention, blocked (skips the keys the mask hides) or dense (the plain attention under the [T, T] mask array)")
	config := fs.String("c", "", "YAML config file of mlx_lm.lora options")
	fs.StringVar(config, "config", "", "same as -c")
	name := fs.String("backend", defaultBackend(), "backend: "+strings.Join(backend.Names(), " or "))
	cpuProfile := fs.String("cpuprofile", "", "write a Go CPU profile of the run to this file (go tool pprof)")
	printUsage, status, done := parseArgs(fs, "lora", loraUsage, args, stdout, stderr)
	if done {
		return status
	}
	// Flags given win over the config file, which wins over the defaults
	// (mlx_lm.lora's main).
	final := d
	if *config != "" {
		if err := train.ReadConfig(*config, &final); err != nil {
			fmt.Fprintf(stderr, "mlxgo lora: -c: %v\n", err)
			return 2
		}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	pick := func(flagName string, dst, src any) {
		if given[flagName] {
			switch p := dst.(type) {
			case *string:
				*p = *src.(*string)
			case *int:
				*p = *src.(*int)
			case *float64:
				*p = *src.(*float64)
			case *bool:
				*p = *src.(*bool)
			}
		}
	}
	pick("model", &final.Model, &c.Model)
	pick("train", &final.Train, &c.Train)
	pick("data", &final.Data, &c.Data)
	pick("fine-tune-type", &final.FineTuneType, &c.FineTuneType)
	pick("optimizer", &final.Optimizer, &c.Optimizer)
	pick("mask-prompt", &final.MaskPrompt, &c.MaskPrompt)
	pick("num-layers", &final.NumLayers, &c.NumLayers)
	pick("batch-size", &final.BatchSize, &c.BatchSize)
	pick("iters", &final.Iters, &c.Iters)
	pick("val-batches", &final.ValBatches, &c.ValBatches)
	pick("learning-rate", &final.LearningRate, &c.LearningRate)
	pick("steps-per-report", &final.StepsPerReport, &c.StepsPerReport)
	pick("steps-per-eval", &final.StepsPerEval, &c.StepsPerEval)
	pick("grad-accumulation-steps", &final.GradAccumulationSteps, &c.GradAccumulationSteps)
	pick("resume-adapter-file", &final.ResumeAdapterFile, &c.ResumeAdapterFile)
	pick("adapter-path", &final.AdapterPath, &c.AdapterPath)
	pick("save-every", &final.SaveEvery, &c.SaveEvery)
	pick("test", &final.Test, &c.Test)
	pick("test-batches", &final.TestBatches, &c.TestBatches)
	pick("max-seq-length", &final.MaxSeqLength, &c.MaxSeqLength)
	pick("grad-checkpoint", &final.GradCheckpoint, &c.GradCheckpoint)
	pick("seed", &final.Seed, &c.Seed)
	pick("segment-layers", &final.SegmentLayers, &c.SegmentLayers)
	pick("train-memory-budget", &final.TrainMemoryBudget, &c.TrainMemoryBudget)
	pick("loss-chunk", &final.LossChunk, &c.LossChunk)
	pick("no-compile", &final.NoCompile, &c.NoCompile)
	pick("loss", &final.Loss, &c.Loss)
	pick("orpo-lambda", &final.ORPOLambda, &c.ORPOLambda)
	pick("orpo-two-forwards", &final.ORPOTwoForwards, &c.ORPOTwoForwards)
	pick("orpo-attention", &final.ORPOAttention, &c.ORPOAttention)
	switch {
	case final.Model == "":
		fmt.Fprint(stderr, "mlxgo lora: --model (or model in the -c file) is required\n\n")
		printUsage(stderr)
		return 2
	case !slices.Contains(backend.Names(), *name):
		fmt.Fprintf(stderr, "mlxgo lora: --backend %q is not compiled in (available: %s)\n", *name, strings.Join(backend.Names(), ", "))
		return 2
	}
	if err := final.Check(); err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: %v\n", err)
		return 2
	}
	stopProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: %v\n", err)
		return 2
	}
	defer stopProfile()
	b, err := backend.Open(*name, backend.Options{})
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: --backend %s: %v\n", *name, err)
		return 2
	}
	defer b.Close()
	fmt.Fprintln(stdout, "Loading pretrained model")
	m, err := loadModel(b, final.Model)
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: --model %s: %v\n", final.Model, err)
		return 1
	}
	defer m.Close()
	PrintWarnings(stderr, m.Warnings())
	text, err := chat.Load(final.Model, m.Config())
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: --model %s: %v\n", final.Model, err)
		return 1
	}
	err = b.Do(func() (err error) {
		defer backend.Recover(&err)
		var peak func() int64
		if devicePeakMemory != nil {
			peak = devicePeakMemory(b)
		}
		return train.RunLoRA(b, m, text, final, stdout, stderr, peak)
	})
	if err != nil {
		fmt.Fprintf(stderr, "mlxgo lora: %v\n", err)
		return 1
	}
	return 0
}
