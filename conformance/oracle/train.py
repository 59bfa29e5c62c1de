"""mlx_lm's LoRA trainer on a tiny checkpoint: fixtures for train.TestTrainFixtures.

Each case runs mlx_lm.lora's --train path as a library (run()'s
np.random.seed, the model and tokenizer, load_dataset, then train_model:
mx.random.seed, linear_to_lora_layers, the optimizer, tuner.trainer.train
with its compiled step) on the optiq-f32 checkpoint with a test tokenizer
(bytelevel-llama3; spm-llama2 for the chat case, whose prompt ends where
the completion starts: the llama3 test template renders an empty think
block in the generation prompt only, so --mask-prompt would mask every
token there) (every token id of the data below lies under the checkpoint's
vocabulary of 1000; the generator checks it), with steps_per_report 1 so
that each report's train_loss is one step's loss. It writes, under out/:

  data/text/{train,valid,test}.jsonl, data/chat/{train,valid}.jsonl   the datasets
  NAME.json          {"tokenizer": the test tokenizer's directory name,
                      "args": the options that differ from CONFIG_DEFAULTS
                      (data relative to out/), "train": [{"it", "loss",
                      "lr"}...], "val": [{"it", "loss"}...]}; "it" of a
                      validation is the step it precedes
  NAME.safetensors   the adapters after the last step (adapters.safetensors)

These are not manifest cases: the Go test reads them directly.
"""

import json
import os
import shutil
import tempfile
import types
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx_lm.lora import CONFIG_DEFAULTS, train_model
from mlx_lm.tuner.callbacks import TrainingCallback
from mlx_lm.tuner.datasets import load_dataset
from mlx_lm.utils import load

import common

TEXT = {
    "train": ["the cat sat on the mat", "a dog ran", "hello world, hello", "one two three four five six", "green tea", "we train small models here"],
    "valid": ["the dog sat", "tea and cats"],
    "test": ["a mat", "small world"],
}
CHAT = {
    "train": [
        [["user", "hi"], ["assistant", "hello there"]],
        [["system", "be brief"], ["user", "name a color"], ["assistant", "green"]],
        [["user", "count"], ["assistant", "one two three"]],
        [["user", "2+2?"], ["assistant", "4"]],
    ],
    "valid": [[["user", "say hi"], ["assistant", "hi"]], [["user", "a color?"], ["assistant", "blue"]]],
}

LORA = {"rank": 4, "dropout": 0.0, "scale": 10.0}
CASES = [
    ("adam", "bytelevel-llama3", {"data": "data/text", "optimizer": "adam", "learning_rate": 1e-2, "batch_size": 2, "iters": 5, "steps_per_eval": 2, "val_batches": -1, "num_layers": 2, "seed": 0}),
    ("adamw_cosine_accum_trunc", "bytelevel-llama3", {"data": "data/text", "optimizer": "adamw", "learning_rate": 1e-2, "lr_schedule": {"name": "cosine_decay", "arguments": [2e-2, 4], "warmup": 1},
                                  "batch_size": 2, "iters": 6, "steps_per_eval": 3, "val_batches": 1, "grad_accumulation_steps": 2, "max_seq_length": 9, "num_layers": 1, "seed": 3}),
    ("sgd", "bytelevel-llama3", {"data": "data/text", "optimizer": "sgd", "learning_rate": 0.05, "batch_size": 1, "iters": 4, "steps_per_eval": 10, "val_batches": 2, "num_layers": 3, "seed": 11}),
    ("chat_mask_prompt", "spm-llama2", {"data": "data/chat", "optimizer": "adam", "learning_rate": 5e-3, "batch_size": 2, "iters": 4, "steps_per_eval": 2, "val_batches": -1, "mask_prompt": True, "num_layers": 2, "seed": 5}),
    # resume_adapter_file relative to out/ (made absolute for the run): the adam case's adapters.
    ("adam_resume", "bytelevel-llama3", {"data": "data/text", "optimizer": "adam", "learning_rate": 1e-3, "batch_size": 2, "iters": 3, "steps_per_eval": 2, "val_batches": -1, "num_layers": 2, "seed": 1, "resume_adapter_file": "adam.safetensors"}),
    ("adam_dropout", "bytelevel-llama3", {"data": "data/text", "optimizer": "adam", "learning_rate": 1e-3, "batch_size": 2, "iters": 4, "steps_per_eval": 2, "val_batches": -1, "num_layers": 2, "seed": 2, "lora_parameters": {"rank": 4, "dropout": 0.2, "scale": 10.0}}),
    ("dora", "bytelevel-llama3", {"data": "data/text", "optimizer": "adam", "learning_rate": 1e-3, "batch_size": 2, "iters": 4, "steps_per_eval": 2, "val_batches": -1, "num_layers": 2, "seed": 4, "fine_tune_type": "dora"}),
    # grad_checkpoint patches TransformerBlock.__call__ for the rest of the process: keep it last.
    ("adam_grad_checkpoint", "bytelevel-llama3", {"data": "data/text", "optimizer": "adam", "learning_rate": 1e-2, "batch_size": 2, "iters": 4, "steps_per_eval": 2, "val_batches": -1, "num_layers": 2, "seed": 0, "grad_checkpoint": True}),
]


def write_data(out):
    for name, rows in TEXT.items():
        d = os.path.join(out, "data", "text")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            f.writelines(json.dumps({"text": t}) + "\n" for t in rows)
    for name, convs in CHAT.items():
        d = os.path.join(out, "data", "chat")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, name + ".jsonl"), "w") as f:
            f.writelines(json.dumps({"messages": [{"role": r, "content": c} for r, c in conv]}) + "\n" for conv in convs)


def model_dir(tmp, models_dir, tokenizers_dir, tokenizer):
    d = os.path.join(tmp, "model-" + tokenizer)
    if os.path.isdir(d):
        return d
    os.makedirs(d)
    for f in ("config.json", "model.safetensors", "model.safetensors.index.json"):
        shutil.copy(os.path.join(models_dir, "optiq-f32", f), d)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(tokenizers_dir, tokenizer, f), d)
    return d


class Recorder(TrainingCallback):
    def __init__(self):
        self.train, self.val = [], []

    def on_train_loss_report(self, info):
        self.train.append({"it": info["iteration"], "loss": info["train_loss"], "lr": info["learning_rate"]})

    def on_val_loss_report(self, info):
        self.val.append({"it": info["iteration"] + 1, "loss": info["val_loss"]})


def generate(out, models_dir, tokenizers_dir):
    os.makedirs(out, exist_ok=True)
    write_data(out)
    with tempfile.TemporaryDirectory() as tmp:
        for name, tokenizer, case in CASES:
            model = model_dir(tmp, models_dir, tokenizers_dir, tokenizer)
            args = dict(CONFIG_DEFAULTS)
            args.update(case)
            args.update({"model": model, "train": True, "data": os.path.join(out, case["data"]), "steps_per_report": 1,
                         "save_every": 1000, "adapter_path": os.path.join(tmp, name), "lora_parameters": case.get("lora_parameters", LORA)})
            if case.get("resume_adapter_file"):
                args["resume_adapter_file"] = os.path.join(out, case["resume_adapter_file"])
            args = types.SimpleNamespace(**args)
            np.random.seed(args.seed)
            m, tok = load(args.model)
            train_set, valid_set, _ = load_dataset(args, tok)
            for s in (train_set, valid_set):
                for i in range(len(s)):
                    ids, _ = s.process(s[i])
                    assert max(ids) < 1000, f"{name}: token {max(ids)} outside the checkpoint's vocabulary"
            rec = Recorder()
            train_model(args, m, train_set, valid_set, rec)
            assert len(rec.train) == args.iters and rec.val, name
            w = mx.load(os.path.join(args.adapter_path, "adapters.safetensors"))
            mx.save_safetensors(os.path.join(out, name + ".safetensors"), w, metadata={"format": "mlx"})
            fixed = dict(case)
            fixed["lora_parameters"] = case.get("lora_parameters", LORA)
            common.write_json(os.path.join(out, name + ".json"), {"tokenizer": tokenizer, "args": fixed, "train": rec.train, "val": rec.val})
