// Package tokenizer reads Hugging Face tokenizer.json and tokenizer_config.json files and
// encodes, decodes and streams text with them, and renders their Jinja chat templates.
//
// The encoding pipeline is the one of the Hugging Face `tokenizers` library:
//
//  1. added tokens (special or not) are split off the raw text: those with normalized=false
//     on the raw text, then, after normalizing the rest, those with normalized=true;
//  2. the normalizer runs on every remaining piece (NFC, NFKC, Replace, Prepend, Strip, ...);
//  3. the pre-tokenizer splits each piece into words (ByteLevel with the GPT-2 regex, Split
//     with the Llama-3 regex, Metaspace, Digits, ...);
//  4. the BPE model turns each word into ids (merges by rank, byte fallback, ignore_merges);
//  5. the post-processor adds special tokens (TemplateProcessing). As in transformers 5,
//     tokenizer_config.json's add_bos_token / add_eos_token play no part.
//
// Decoding maps ids to token strings and runs the decoder chain (ByteLevel, Metaspace,
// Replace, ByteFallback, Fuse, Strip, BPEDecoder). A Stream decodes incrementally and never
// emits half a UTF-8 character or a space the full decode would not have.
//
// The regular expressions that the Go regexp package cannot run (the lookahead in
// `\s+(?!\S)` of the GPT-2 and Llama-3 patterns) are hand-written scanners with the exact
// semantics of the Oniguruma patterns (pretokenize_regex.go). Any component this package
// does not implement makes loading fail with an error that names the component and the file.
//
// Chat templates are rendered with gonja (github.com/nikolalohinski/gonja/v2), configured
// as transformers configures jinja2: trim_blocks and lstrip_blocks on, raise_exception and
// strftime_now defined, and tojson writing JSON as Python's json.dumps does.
package tokenizer
