// Package train fine-tunes LoRA adapters as mlx_lm.lora does, on any
// backend with gradients (backend.Differentiator):
//
//   - [LoadDir] reads a data directory (train.jsonl, valid.jsonl,
//     test.jsonl) in mlx_lm's formats (text; prompt and completion; chat
//     messages) into token sequences, with --mask-prompt's offsets
//     (mlx_lm.tuner.datasets);
//   - [Batches] is tuner.trainer.iterate_batches: the order of its batches
//     from numpy's legacy global generator ([NumpyRNG]), padding and
//     truncation to the maximum sequence length;
//   - [Loss] is tuner.trainer.default_loss;
//   - [Adam], [AdamW] and [SGD] are mlx.optimizers' optimizers and
//     [Schedule] mlx_lm's build_schedule over mlx.optimizers.schedulers;
//   - [Run] is tuner.trainer.train: validation, reports, saves.
package train
