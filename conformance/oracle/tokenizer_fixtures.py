"""Tokenizer and chat-template fixtures: small tokenizers trained with Hugging Face `tokenizers`.

Called by generate.py as `tokenizer_fixtures.generate(out_dir)`. (The module is not named
tokenizers.py: generate.py puts this directory first on sys.path, where that name would shadow the
`tokenizers` package for transformers and mlx_lm too.) Layout and case list: conformance/README.md, section
"Tokenizer fixtures".

For every tokenizer in SPECS:
  1. train a BPE model on corpus/mixed.txt with fixed settings (training is deterministic: the
     generator trains each tokenizer twice and asserts identical JSON);
  2. write tokenizer.json (as `Tokenizer.to_str()` gives it) and a tokenizer_config.json with the
     special tokens and a chat template;
  3. record, for every string of HARD_STRINGS, the ids with and without special tokens and the
     decodings of those ids (with and without skipping special tokens); the ids of 200 seeded random
     strings (FUZZ_ALPHABET) and of the whole corpus; the decoding of every single token id; and the
     chat template rendered by transformers' own apply_chat_template.
"""

import importlib.metadata as md
import json
import os

import transformers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, "corpus", "mixed.txt")

GPT2_PATTERN = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# SmolLM2-Instruct's ChatML template (the text of its tokenizer_config.json chat_template).
SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A TEST TEMPLATE written for this project, modelled on the Qwen/MiniCPM style of ChatML templates
# with tools and an enable_thinking switch. It is NOT MiniCPM5's template.
THINK_TEMPLATE = """{#- mlxgo test template (ChatML with tools and enable_thinking); not a real model's template -#}
{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call these functions:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools><|im_end|>\\n" }}
{%- elif messages[0].role == 'system' %}
    {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role not in ['system', 'user', 'assistant', 'tool'] %}
        {{- raise_exception('Unknown role: ' + message.role) }}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index and reasoning_content %}
            {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip() + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content | trim + '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""

# A TEST TEMPLATE in the Llama-2 [INST] style, without whitespace control, so that the renderer's
# trim_blocks / lstrip_blocks handling (transformers turns both on) shows in the output.
INST_TEMPLATE = """{#- mlxgo test template ([INST] style, relies on trim_blocks/lstrip_blocks) #}
{% if messages[0]['role'] == 'system' %}
    {% set loop_messages = messages[1:] %}
    {% set system_message = messages[0]['content'] | trim %}
{% else %}
    {% set loop_messages = messages %}
    {% set system_message = false %}
{% endif %}
{% for message in loop_messages %}
    {% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {% endif %}
    {% if loop.index0 == 0 and system_message != false %}
        {% set content = '<<SYS>>\\n' ~ system_message ~ '\\n<</SYS>>\\n\\n' ~ message['content'] %}
    {% else %}
        {% set content = message['content'] %}
    {% endif %}
    {% if message['role'] == 'user' %}
        {{ bos_token ~ '[INST] ' ~ content | trim ~ ' [/INST]' }}
    {% elif message['role'] == 'assistant' %}
        {{ ' ' ~ content | trim ~ ' ' ~ eos_token }}
    {% endif %}
{% endfor %}
"""

CHAT_CONVERSATIONS = {
    "single": [{"role": "user", "content": "Hello! How are you?"}],
    "system": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Name a colour."},
    ],
    "multi": [
        {"role": "system", "content": "  Answer in one word.  "},
        {"role": "user", "content": "Capital of France?"},
        {"role": "assistant", "content": "Paris"},
        {"role": "user", "content": "And of Japan? 日本"},
    ],
    "think": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "<think>\nTwo plus two.\n</think>\n\n4"},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "<think>\nThree and three.\n</think>\n\n6"},
    ],
    "tool": [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "Let me check."},
        {"role": "tool", "content": "  {\"temp\": -3}  "},
        {"role": "tool", "content": "sunny"},
    ],
    "badrole": [{"role": "wizard", "content": "abracadabra"}],
    "alternation": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
}

# Tools are given with keys already in sorted order: a Go map keeps no insertion order, so the Go
# renderer's tojson writes keys sorted; with these inputs both orders agree.
TOOLS = [
    {"description": "Current weather", "name": "get_weather", "parameters": {"city": "string"}},
]

# (conversation, add_generation_prompt, extra keyword arguments, tools)
CHAT_CASES = [
    ("single", True, {}, None),
    ("single", False, {}, None),
    ("system", True, {}, None),
    ("multi", True, {}, None),
    ("multi", False, {}, None),
    ("think", True, {}, None),
    ("think", True, {"enable_thinking": False}, None),
    ("think", True, {"enable_thinking": True}, None),
    ("tool", True, {}, TOOLS),
    ("system", True, {}, TOOLS),
    ("badrole", True, {}, None),
    ("alternation", True, {}, None),
]

HARD_STRINGS = [
    "",
    " ",
    "  ",
    "\t",
    "\n",
    "\n\n\n",
    " \n \n",
    "   leading spaces",
    "trailing spaces   ",
    "a  b   c    d",
    "tabs\tand\t\ttabs\t",
    "line1\nline2\r\nline3\rline4",
    "a \nb",
    "a  \n  b\n\n  c",
    "Hello, world!",
    "Hello world",
    " Hello world",
    "It's we'll they're I'd you've I'm she'd",
    "HE'S DON'T WE'LL 'Re",
    "'Sup 'LLama 'REally 'tis O'NEILLs 'ſx",
    "12345 6789 3.14159 1e10 100,000 007",
    "abc123def4567ghi",
    "今天天气很好，我们去公园散步吧。",
    "東京の朝はとても静かです",
    "서울의 봄은 짧지만 아름답습니다.",
    "Привет, мир!",
    "😀",
    "👨\u200d👩\u200d👧\u200d👦 family",
    "🇫🇷🇯🇵 flags and 👍🏽",
    "❤️ heart with VS16",
    "e\u0301 vs \u00e9",
    "Z\u0324\u0354\u0367\u0311\u0313a\u0308\u0356\u032d\u0308\u0307lgo",
    "\ufb01 ligature, \u2460 circled, \uff21\uff22\uff23 fullwidth, \u212b angstrom",
    "\U0001d518\U0001d52b\U0001d526\U0001d520\U0001d52c\U0001d521\U0001d522 fraktur",
    "\u16a0\u16c7\u16bb runes and \u2603 snowman",
    "bell\u0007 and nul\u0000 controls",
    "mixed English 和中文 and 日本語 with emoji 🚀!",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a && b) { return c || d; }\n\t\tend",
    "<|im_start|>user\nhi<|im_end|>\n",
    "a<|endoftext|>b",
    "<|im_start|><|im_start|>",
    "<|im_sta partial",
    "<s>x</s> and <unk>",
    "x  <|mask|>  y",
    "a[WORD]b [WORD] c",
    "<|begin_of_text|>Hello",
    "!!!\n\n???",
    "   \n",
    "The café serves crème brûlée.",
    "∑ ∫ √ ≤ ≥ ≠ ∞ π",
]

# Alphabet of the fuzz strings: the characters the split patterns treat differently (spaces of
# several kinds, newlines, apostrophes, letters of several scripts, digits of several kinds,
# punctuation, emoji with ZWJ / variation selectors / skin tones, combining marks) and
# fragments of the special tokens.
FUZZ_ALPHABET = (
    [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "'", "'s", "'LL", "'ve"]
    + list("aZéßΩжあア한中文") + ["hello", "World", "the", "ing"]
    + list("0123456789") + ["\u0663", "\u00b2", "\u2164", "12345"]
    + list(".,;:!?-_()[]{}<>/\\|@#$%^&*+=~`\"") + ["...", "--", "->"]
    + ["😀", "👍🏽", "❤️", "👨\u200d👩\u200d👧", "\u200d", "\ufe0f", "🇯🇵", "\u0301", "\u0308", "e\u0301"]
    + ["<|im_start|>", "<|im_end|>", "<s>", "</s>", "<|mask|>", "[WORD]", "<|", "|>", "<0x41>", "\u2581"]
)


def _fuzz_strings(n=200, seed=20251130):
    """Deterministic random strings over FUZZ_ALPHABET (Python's random is stable across versions
    for a given seed and these calls)."""
    import random

    rng = random.Random(seed)
    return ["".join(rng.choice(FUZZ_ALPHABET) for _ in range(rng.randrange(0, 24))) for _ in range(n)]


BYTE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _byte_tokens():
    return [f"<0x{b:02X}>" for b in range(256)]


def _spm_model(tok, extra_special):
    """Rebuild a trained BPE as SentencePiece-style: byte fallback tokens appended, unk, fuse_unk."""
    d = json.loads(tok.to_str())
    vocab = dict(d["model"]["vocab"])
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in d["model"]["merges"]]
    for t in _byte_tokens():
        if t not in vocab:
            vocab[t] = len(vocab)
    return models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=True)


def _lines():
    with open(CORPUS, encoding="utf-8") as f:
        return f.read().splitlines(keepends=True)


def _build(spec):
    """Train one tokenizer from its spec; returns a tokenizers.Tokenizer."""
    kind = spec["kind"]
    specials = spec["specials"]
    if kind == "bytelevel":
        tok = Tokenizer(models.BPE(ignore_merges=spec.get("ignore_merges", False)))
        tok.normalizer = spec.get("normalizer")
        tok.pre_tokenizer = spec["pre_tokenizer"]
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=spec["vocab_size"],
            min_frequency=1,
            show_progress=False,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        )
    else:
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.normalizer = spec.get("normalizer")
        tok.pre_tokenizer = spec.get("pre_tokenizer")
        trainer = trainers.BpeTrainer(
            vocab_size=spec["vocab_size"],
            min_frequency=1,
            show_progress=False,
            special_tokens=specials,
        )
    tok.train_from_iterator(_lines(), trainer=trainer)
    if kind == "spm":
        added = json.loads(tok.to_str())["added_tokens"]
        tok.model = _spm_model(tok, specials)
        tok.decoder = spec["decoder"]
        # Replacing the model keeps the added vocabulary; make sure the specials are still special.
        assert [a["content"] for a in added] == specials, added
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec.get("more_specials", [])])
    for t in spec.get("added", []):
        tok.add_tokens([t])
    if spec.get("post") is not None:
        tok.post_processor = spec["post"](tok)
    return tok


def _template_post(bos):
    def make(tok):
        return processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )

    return make


SPECS = [
    {
        # SmolLM2-like: Digits (individual) then GPT-2 ByteLevel regex, ByteLevel decoder and post-processor.
        "name": "bytelevel-gpt2",
        "kind": "bytelevel",
        "vocab_size": 1200,
        "specials": BYTE_SPECIALS,
        "pre_tokenizer": pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
        ),
        "post": lambda tok: processors.ByteLevel(trim_offsets=False),
        "config": {
            "bos_token": "<|im_start|>",
            "eos_token": "<|im_end|>",
            "unk_token": "<|endoftext|>",
            "pad_token": "<|im_end|>",
            "add_prefix_space": False,
            "chat_template": SMOLLM2_TEMPLATE,
        },
        "templates": ["smollm2"],
    },
    {
        # Llama-3-like: Split with the Llama-3 regex (Isolated), ByteLevel without regex, ignore_merges,
        # NFC, TemplateProcessing adding <|begin_of_text|>, an lstrip/rstrip special and a single_word token.
        "name": "bytelevel-llama3",
        "kind": "bytelevel",
        "vocab_size": 1100,
        "ignore_merges": True,
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|im_start|>", "<|im_end|>"],
        "normalizer": normalizers.NFC(),
        "pre_tokenizer": pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False, trim_offsets=True),
            ]
        ),
        "more_specials": [],
        "added": [
            AddedToken("<|mask|>", lstrip=True, rstrip=True, special=True, normalized=False),
            AddedToken("[WORD]", single_word=True, special=False, normalized=True),
        ],
        "post": _template_post("<|begin_of_text|>"),
        "config": {
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|im_end|>",
            "chat_template": THINK_TEMPLATE,
        },
        "templates": ["think"],
    },
    {
        # Llama-2-like SentencePiece BPE: Prepend + Replace normalizers, no pre-tokenizer, byte fallback,
        # decoder Replace/ByteFallback/Fuse/Strip, TemplateProcessing adding <s>.
        "name": "spm-llama2",
        "kind": "spm",
        "vocab_size": 900,
        "specials": ["<unk>", "<s>", "</s>"],
        "normalizer": normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")]),
        "pre_tokenizer": None,
        "decoder": decoders.Sequence(
            [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
        ),
        "post": _template_post("<s>"),
        "config": {
            "bos_token": "<s>",
            "eos_token": "</s>",
            "unk_token": "<unk>",
            "chat_template": INST_TEMPLATE,
        },
        "templates": ["inst"],
    },
    {
        # SentencePiece BPE with the Metaspace pre-tokenizer (prepend_scheme "first"), NFKC, byte fallback,
        # decoder Metaspace/ByteFallback/Fuse (tokenizers' Metaspace decoder drops every replacement
        # character of the first token it sees, so it must run before Fuse), no post-processor.
        "name": "spm-metaspace",
        "kind": "spm",
        "vocab_size": 800,
        "specials": ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"],
        "normalizer": normalizers.NFKC(),
        "pre_tokenizer": pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first", split=True),
        "decoder": decoders.Sequence(
            [decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=True), decoders.ByteFallback(), decoders.Fuse()]
        ),
        "post": None,
        "config": {
            "bos_token": "<s>",
            "eos_token": "<|im_end|>",
            "unk_token": "<unk>",
            # transformers 5 leaves special tokens to tokenizer.json's post-processor and ignores
            # these (the recorded transformers_ids show it); kept to test that mlxgo does too.
            "add_bos_token": True,
            "add_eos_token": True,
            "chat_template": THINK_TEMPLATE,
        },
        "templates": ["think"],
    },
]


def _config(spec):
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 4096, "clean_up_tokenization_spaces": False}
    cfg.update(spec["config"])
    return cfg


def _write_text(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def _chat_cases(directory):
    """Render every CHAT_CASES entry with transformers.apply_chat_template (tokenize=False)."""
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    out = []
    for conv, agp, extra, tools in CHAT_CASES:
        name = conv + ("/gen" if agp else "/nogen")
        for k in sorted(extra):
            name += f"/{k}={json.dumps(extra[k])}"
        if tools:
            name += "/tools"
        case = {
            "name": name,
            "messages": CHAT_CONVERSATIONS[conv],
            "add_generation_prompt": agp,
            "extra": extra,
            "tools": tools,
        }
        try:
            case["text"] = tok.apply_chat_template(
                CHAT_CONVERSATIONS[conv], tools=tools, tokenize=False, add_generation_prompt=agp, **extra
            )
        except Exception as e:  # the template's raise_exception: record that it raised, and the message
            case["error"] = str(e)
        out.append(case)
    return out


def _cases(tok, directory):
    vocab_size = tok.get_vocab_size(with_added_tokens=True)
    hf = transformers.AutoTokenizer.from_pretrained(directory)

    def pre(s):
        """The pre-tokenizer alone on the raw string (no added tokens, no normalizer); null without one."""
        if tok.pre_tokenizer is None:
            return None
        return [p for p, _ in tok.pre_tokenizer.pre_tokenize_str(s)]

    strings = []
    for s in HARD_STRINGS:
        with_special = tok.encode(s, add_special_tokens=True).ids
        without = tok.encode(s, add_special_tokens=False).ids
        strings.append(
            {
                "text": s,
                "ids": with_special,
                "ids_no_special": without,
                "decoded": tok.decode(with_special, skip_special_tokens=False),
                "decoded_skip_special": tok.decode(with_special, skip_special_tokens=True),
                "pre_tokens": pre(s),
                "transformers_ids": hf(s).input_ids,
            }
        )
    with open(CORPUS, encoding="utf-8") as f:
        corpus = f.read()
    return {
        "vocab_size": vocab_size,
        "strings": strings,
        "fuzz": [
            {"text": s, "ids_no_special": tok.encode(s, add_special_tokens=False).ids, "pre_tokens": pre(s)}
            for s in _fuzz_strings()
        ],
        "corpus_ids": tok.encode(corpus, add_special_tokens=False).ids,
        "decode_each": [tok.decode([i], skip_special_tokens=False) for i in range(vocab_size)],
        "chat": _chat_cases(directory),
        "oracle": {
            "tokenizers": md.version("tokenizers"),
            "transformers": md.version("transformers"),
            "jinja2": md.version("Jinja2"),
        },
    }


def _write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True, indent=1, ensure_ascii=False)
        f.write("\n")


def generate(out_dir):
    """Write every tokenizer under out_dir/<name>/; returns index entries {"name", "file"}."""
    entries = []
    for spec in SPECS:
        tok = _build(spec)
        again = _build(spec)
        if tok.to_str() != again.to_str():
            raise SystemExit(f"tokenizer {spec['name']}: training is not deterministic")
        d = os.path.join(out_dir, spec["name"])
        os.makedirs(d, exist_ok=True)
        # Pretty-printed for readable diffs; json.loads of it equals the library's own serialisation.
        _write_json(os.path.join(d, "tokenizer.json"), json.loads(tok.to_str()))
        _write_json(os.path.join(d, "tokenizer_config.json"), _config(spec))
        cases = _cases(Tokenizer.from_file(os.path.join(d, "tokenizer.json")), d)
        cases["name"] = "tokenizer/" + spec["name"]
        _write_json(os.path.join(d, "cases.json"), cases)
        entries.append({"name": cases["name"], "file": os.path.join(d, "cases.json")})
    return entries


if __name__ == "__main__":
    import sys

    generate(sys.argv[1] if len(sys.argv) > 1 else "/tmp/tokfix")
