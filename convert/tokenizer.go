package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/gguf"
)

// Token types of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
const (
	tokenNormal      = 1
	tokenUnknown     = 2
	tokenControl     = 3
	tokenUserDefined = 4
	tokenUnused      = 5
	tokenByte        = 6
)

// llama3Regex is the split regex of Llama 3's tokenizer.json (llama.cpp's
// LLAMA_VOCAB_PRE_TYPE_LLAMA3).
const llama3Regex = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`

func byteLevel(useRegex bool) map[string]any {
	return map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": useRegex}
}

// preTokenizers maps tokenizer.ggml.pre to the Hugging Face pre-tokenizer
// with the splits llama.cpp's llama-vocab.cpp uses for that name:
//
//   - gpt-2, mpt, olmo, jais: the GPT-2 regex alone (ByteLevel with
//     use_regex).
//   - smollm, starcoder, refact, command-r, codeshell, exaone, minerva-7b:
//     "\p{N}" first (each digit alone: Digits with individual_digits), then
//     the GPT-2 regex.
//   - llama-bpe (Llama 3): the Llama 3 regex as an isolated Split, then
//     ByteLevel without its own regex.
var preTokenizers = map[string]func() map[string]any{}

func init() {
	gpt2 := func() map[string]any { return byteLevel(true) }
	digits := func() map[string]any {
		return map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Digits", "individual_digits": true},
			byteLevel(true),
		}}
	}
	llama3 := func() map[string]any {
		return map[string]any{"type": "Sequence", "pretokenizers": []any{
			map[string]any{"type": "Split", "pattern": map[string]any{"Regex": llama3Regex}, "behavior": "Isolated", "invert": false},
			byteLevel(false),
		}}
	}
	for _, n := range []string{"gpt-2", "mpt", "olmo", "jais"} {
		preTokenizers[n] = gpt2
	}
	for _, n := range []string{"smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"} {
		preTokenizers[n] = digits
	}
	preTokenizers["llama-bpe"] = llama3
}

func supportedPre() string {
	names := make([]string, 0, len(preTokenizers))
	for n := range preTokenizers {
		names = append(names, n)
	}
	slicesSort(names)
	return strings.Join(names, ", ")
}

// tokenizerFiles are the bytes of tokenizer.json and tokenizer_config.json.
type tokenizerFiles struct {
	tokenizer, config []byte
}

type addedToken struct {
	ID         int    `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	Lstrip     bool   `json:"lstrip"`
	Rstrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// buildTokenizer builds tokenizer.json and tokenizer_config.json from the
// tokenizer.ggml.* metadata and tokenizer.chat_template.
func buildTokenizer(f *gguf.File, vocabSize, maxLen int) (*tokenizerFiles, error) {
	m := meta{f}
	model, ok, err := f.String("tokenizer.ggml.model")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf("tokenizer.ggml.model", "missing: the file has no tokenizer")
	}
	if model != "gpt2" {
		return nil, m.errf("tokenizer.ggml.model", "%q is not supported; mlxgo converts gpt2 (byte-level BPE) tokenizers only", model)
	}
	pre, ok, err := f.String("tokenizer.ggml.pre")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf("tokenizer.ggml.pre", "missing: without it the pre-tokenizer is unknown (supported: %s)", supportedPre())
	}
	preTok, ok := preTokenizers[pre]
	if !ok {
		return nil, m.errf("tokenizer.ggml.pre", "%q is not supported (supported: %s)", pre, supportedPre())
	}
	tokens, ok, err := f.Strings("tokenizer.ggml.tokens")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf("tokenizer.ggml.tokens", "missing")
	}
	if len(tokens) > vocabSize {
		return nil, m.errf("tokenizer.ggml.tokens", "%d tokens, more than the %d rows of token_embd.weight", len(tokens), vocabSize)
	}
	types, ok, err := f.Ints("tokenizer.ggml.token_type")
	if err != nil {
		return nil, err
	}
	if !ok {
		types = make([]int64, len(tokens))
		for i := range types {
			types[i] = tokenNormal
		}
	}
	if len(types) != len(tokens) {
		return nil, m.errf("tokenizer.ggml.token_type", "%d entries for %d tokens", len(types), len(tokens))
	}
	mergeStrs, ok, err := f.Strings("tokenizer.ggml.merges")
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, m.errf("tokenizer.ggml.merges", "missing (a BPE tokenizer needs its merges)")
	}
	merges := make([][2]string, len(mergeStrs))
	for i, s := range mergeStrs {
		a, b, ok := strings.Cut(s, " ")
		if !ok || a == "" || b == "" || strings.Contains(b, " ") {
			return nil, m.errf("tokenizer.ggml.merges", "entry %d is %q, want two tokens separated by one space", i, s)
		}
		merges[i] = [2]string{a, b}
	}

	var added []addedToken
	seen := map[string]int{}
	for id, tok := range tokens {
		if prev, dup := seen[tok]; dup {
			return nil, m.errf("tokenizer.ggml.tokens", "token %q appears twice (ids %d and %d); a BPE vocabulary maps each token to one id", tok, prev, id)
		}
		seen[tok] = id
		switch types[id] {
		case tokenControl:
			added = append(added, addedToken{ID: id, Content: tok, Special: true})
		case tokenUserDefined:
			added = append(added, addedToken{ID: id, Content: tok})
		case tokenNormal, tokenUnknown, tokenUnused, tokenByte:
		default:
			return nil, m.errf("tokenizer.ggml.token_type", "entry %d is %d, want 1 to 6", id, types[id])
		}
	}
	name := func(key string) (string, int, bool, error) {
		v, ok, err := f.Int(key)
		if err != nil || !ok {
			return "", 0, false, err
		}
		if v < 0 || v >= int64(len(tokens)) {
			return "", 0, false, m.errf(key, "%d is not a token id (%d tokens)", v, len(tokens))
		}
		return tokens[v], int(v), true, nil
	}
	addBOS, _, err := f.Bool("tokenizer.ggml.add_bos_token")
	if err != nil {
		return nil, err
	}
	addEOS, _, err := f.Bool("tokenizer.ggml.add_eos_token")
	if err != nil {
		return nil, err
	}
	if prefix, _, err := f.Bool("tokenizer.ggml.add_space_prefix"); err != nil {
		return nil, err
	} else if prefix {
		return nil, m.errf("tokenizer.ggml.add_space_prefix", "true is not supported for a gpt2 tokenizer (the byte-level pre-tokenizers here add no prefix space)")
	}

	cfg := map[string]any{
		"add_bos_token":                addBOS,
		"add_eos_token":                addEOS,
		"clean_up_tokenization_spaces": false,
		"tokenizer_class":              "GPT2Tokenizer",
	}
	if maxLen > 0 {
		cfg["model_max_length"] = maxLen
	}
	specials := map[string][2]any{} // role → (content, id)
	for _, r := range []struct{ key, role string }{
		{"tokenizer.ggml.bos_token_id", "bos_token"},
		{"tokenizer.ggml.eos_token_id", "eos_token"},
		{"tokenizer.ggml.unknown_token_id", "unk_token"},
		{"tokenizer.ggml.padding_token_id", "pad_token"},
	} {
		s, id, ok, err := name(r.key)
		if err != nil {
			return nil, err
		}
		if ok {
			cfg[r.role] = s
			specials[r.role] = [2]any{s, id}
		}
	}
	if tmpl, ok, err := f.String("tokenizer.chat_template"); err != nil {
		return nil, err
	} else if ok {
		cfg["chat_template"] = tmpl
	}
	dec := map[string]any{}
	for _, a := range added {
		dec[strconv.Itoa(a.ID)] = map[string]any{
			"content": a.Content, "lstrip": a.Lstrip, "normalized": a.Normalized,
			"rstrip": a.Rstrip, "single_word": a.SingleWord, "special": a.Special,
		}
	}
	cfg["added_tokens_decoder"] = dec

	var post any = map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true}
	if addBOS || addEOS {
		post, err = templatePost(addBOS, addEOS, specials)
		if err != nil {
			return nil, m.errf("tokenizer.ggml.add_bos_token", "%v", err)
		}
	}

	var b bytes.Buffer
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": ")
	writeJSON(&b, added)
	b.WriteString(",\n  \"normalizer\": null,\n  \"pre_tokenizer\": ")
	writeJSON(&b, preTok())
	b.WriteString(",\n  \"post_processor\": ")
	writeJSON(&b, post)
	b.WriteString(",\n  \"decoder\": ")
	writeJSON(&b, map[string]any{"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true})
	b.WriteString(",\n  \"model\": {\n    \"type\": \"BPE\", \"dropout\": null, \"unk_token\": null, \"continuing_subword_prefix\": null,\n" +
		"    \"end_of_word_suffix\": null, \"fuse_unk\": false, \"byte_fallback\": false, \"ignore_merges\": false,\n    \"vocab\": {")
	for id, tok := range tokens {
		if id > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		writeJSON(&b, tok)
		fmt.Fprintf(&b, ": %d", id)
	}
	b.WriteString("\n    },\n    \"merges\": [")
	for i, mg := range merges {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n      ")
		writeJSON(&b, mg)
	}
	b.WriteString("\n    ]\n  }\n}\n")

	cb, err := marshalIndent(cfg)
	if err != nil {
		return nil, err
	}
	return &tokenizerFiles{tokenizer: b.Bytes(), config: cb}, nil
}

// templatePost is the TemplateProcessing post-processor that adds BOS
// and/or EOS around each sequence.
func templatePost(bos, eos bool, specials map[string][2]any) (any, error) {
	var single, pair []any
	spec := map[string]any{}
	add := func(role string) error {
		s, ok := specials[role]
		if !ok {
			return fmt.Errorf("set, but the file has no %s id", role)
		}
		tok := s[0].(string)
		spec[tok] = map[string]any{"id": tok, "ids": []int{s[1].(int)}, "tokens": []string{tok}}
		return nil
	}
	seq := func(id string, typeID int) map[string]any {
		return map[string]any{"Sequence": map[string]any{"id": id, "type_id": typeID}}
	}
	tok := func(role string, typeID int) map[string]any {
		return map[string]any{"SpecialToken": map[string]any{"id": specials[role][0], "type_id": typeID}}
	}
	if bos {
		if err := add("bos_token"); err != nil {
			return nil, err
		}
		single = append(single, tok("bos_token", 0))
	}
	single = append(single, seq("A", 0))
	pair = append(pair, single...)
	if eos {
		if err := add("eos_token"); err != nil {
			return nil, err
		}
		single = append(single, tok("eos_token", 0))
		pair = append(pair, tok("eos_token", 0))
	}
	if bos {
		pair = append(pair, tok("bos_token", 1))
	}
	pair = append(pair, seq("B", 1))
	if eos {
		pair = append(pair, tok("eos_token", 1))
	}
	return map[string]any{"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": spec}, nil
}

// writeJSON appends v as compact JSON without HTML escaping.
func writeJSON(b *bytes.Buffer, v any) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	enc.Encode(v)
	b.Truncate(b.Len() - 1) // Encode's newline
}

func slicesSort(s []string) { sort.Strings(s) }
