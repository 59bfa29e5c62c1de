package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// Example is one tokenized dataset line: its tokens and the offset of
// the first token the loss counts (0, or the prompt's length with
// --mask-prompt). Fields is the number of fields of its JSON object:
// mlx_lm's CacheDataset sorts a dataset by it (its itemlen is the length
// of the raw record, not of its tokens).
type Example struct {
	Tokens []int32
	Offset int
	Fields int
	Source string // "file:line", for warnings
}

// DataOptions are mlx_lm's dataset options: the field names of each
// format (empty means mlx_lm's default) and mask_prompt.
type DataOptions struct {
	MaskPrompt                                    bool
	TextFeature, PromptFeature, CompletionFeature string
	ChatFeature                                   string
}

func (o DataOptions) names() (text, prompt, completion, chat string) {
	or := func(s, d string) string {
		if s == "" {
			return d
		}
		return s
	}
	return or(o.TextFeature, "text"), or(o.PromptFeature, "prompt"), or(o.CompletionFeature, "completion"), or(o.ChatFeature, "messages")
}

// LoadDir reads dir/train.jsonl, dir/valid.jsonl and dir/test.jsonl as
// mlx_lm's load_local_dataset: a missing file is an empty set.
func LoadDir(dir string, text *chat.Text, o DataOptions) (trainSet, valid, test []Example, err error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, nil, nil, fmt.Errorf("train: data: %w", err)
	} else if !st.IsDir() {
		return nil, nil, nil, fmt.Errorf("train: data %s is not a directory (want one with train.jsonl, valid.jsonl, test.jsonl)", dir)
	}
	sets := make([][]Example, 3)
	for i, n := range []string{"train", "valid", "test"} {
		sets[i], err = LoadFile(filepath.Join(dir, n+".jsonl"), text, o)
		if errors.Is(err, fs.ErrNotExist) {
			sets[i], err = nil, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return sets[0], sets[1], sets[2], nil
}

// LoadFile reads one .jsonl file: one JSON object a line, all in the
// format mlx_lm's create_dataset picks from the first line (prompt and
// completion, then chat messages, then text). A line that is not a JSON
// object or lacks its format's fields is an error naming the file and
// line. The error wraps fs.ErrNotExist when the file is missing.
func LoadFile(path string, text *chat.Text, o DataOptions) ([]Example, error) {
	f, _, err := safefile.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer f.Close()
	textKey, promptKey, completionKey, chatKey := o.names()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 64<<20)
	var out []Example
	format := ""
	for line := 1; sc.Scan(); line++ {
		where := fmt.Sprintf("%s:%d", path, line)
		var rec map[string]json.RawMessage
		if err := json.Unmarshal(bytes.TrimSpace(sc.Bytes()), &rec); err != nil {
			return nil, fmt.Errorf("train: %s: not a JSON object: %w", where, err)
		}
		if format == "" {
			switch {
			case rec[promptKey] != nil && rec[completionKey] != nil:
				format = "completions"
			case rec[chatKey] != nil:
				format = "chat"
			case rec[textKey] != nil:
				if o.MaskPrompt {
					return nil, fmt.Errorf("train: %s: --mask-prompt is not supported for a text dataset", where)
				}
				format = "text"
			default:
				return nil, fmt.Errorf("train: %s: unsupported data format: want fields %q and %q, %q, or %q", where, promptKey, completionKey, chatKey, textKey)
			}
		}
		var ex Example
		switch format {
		case "text":
			ex, err = textExample(rec, textKey, text)
		case "completions":
			ex, err = completionExample(rec, promptKey, completionKey, text, o.MaskPrompt)
		case "chat":
			ex, err = chatExample(rec, chatKey, text, o.MaskPrompt)
		}
		if err != nil {
			return nil, fmt.Errorf("train: %s (%s format): %w", where, format, err)
		}
		if len(ex.Tokens) == 0 {
			return nil, fmt.Errorf("train: %s: the line has no tokens", where)
		}
		ex.Fields = len(rec)
		ex.Source = where
		out = append(out, ex)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", path, err)
	}
	return out, nil
}

func str(rec map[string]json.RawMessage, key string) (string, error) {
	raw, ok := rec[key]
	if !ok {
		return "", fmt.Errorf("no field %q", key)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", fmt.Errorf("field %q is not a string", key)
	}
	return s, nil
}

// textExample is TextDataset.process: the text encoded with the
// tokenizer's special tokens, the EOS token appended unless last.
func textExample(rec map[string]json.RawMessage, key string, text *chat.Text) (Example, error) {
	s, err := str(rec, key)
	if err != nil {
		return Example{}, err
	}
	ids := text.Tok.Encode(s)
	eos, ok := text.Tok.TokenToID(text.Tok.Config().EOSToken)
	if !ok {
		return Example{}, fmt.Errorf("the tokenizer's eos_token %q is not in its vocabulary", text.Tok.Config().EOSToken)
	}
	if len(ids) == 0 || ids[len(ids)-1] != eos {
		ids = append(ids, eos)
	}
	return Example{Tokens: ids}, nil
}

// completionExample is CompletionsDataset.process: a user and an
// assistant message through the chat template; with mask the offset is
// the length of the user message rendered with the generation prompt.
func completionExample(rec map[string]json.RawMessage, pk, ck string, text *chat.Text, mask bool) (Example, error) {
	p, err := str(rec, pk)
	if err != nil {
		return Example{}, err
	}
	c, err := str(rec, ck)
	if err != nil {
		return Example{}, err
	}
	msgs := []tokenizer.Message{{Role: "user", Content: p}, {Role: "assistant", Content: c}}
	return templated(rec, msgs, text, mask, true)
}

// chatExample is ChatDataset.process: the messages through the chat
// template; with mask the offset is the length of all but the last
// message rendered (with the generation prompt when the last message is
// the assistant's).
func chatExample(rec map[string]json.RawMessage, key string, text *chat.Text, mask bool) (Example, error) {
	var raw []map[string]any
	if err := json.Unmarshal(rec[key], &raw); err != nil {
		return Example{}, fmt.Errorf("field %q is not a list of messages", key)
	}
	if len(raw) == 0 {
		return Example{}, fmt.Errorf("field %q has no messages", key)
	}
	msgs := make([]tokenizer.Message, len(raw))
	for i, m := range raw {
		role, ok1 := m["role"].(string)
		content, ok2 := m["content"].(string)
		if !ok1 || !ok2 {
			return Example{}, fmt.Errorf("%s[%d] needs a string role and a string content", key, i)
		}
		msgs[i] = tokenizer.Message{Role: role, Content: content}
	}
	return templated(rec, msgs, text, mask, msgs[len(msgs)-1].Role == "assistant")
}

// templated renders msgs (and the line's tools) with the chat template,
// without a generation prompt, encoded without the tokenizer's special
// tokens as mlx_lm's TokenizerWrapper.apply_chat_template (which sets
// enable_thinking to whether the vocabulary has thinking tokens unless
// the caller sets it: text.Extra may); with mask, the
// offset is the rendering of msgs[:len-1] (with the generation prompt
// when genPrompt).
func templated(rec map[string]json.RawMessage, msgs []tokenizer.Message, text *chat.Text, mask, genPrompt bool) (Example, error) {
	if !text.Tok.HasChatTemplate() {
		return Example{}, errors.New("the tokenizer has no chat_template, which this format needs")
	}
	var tools []map[string]any
	if raw, ok := rec["tools"]; ok && string(raw) != "null" {
		if err := json.Unmarshal(raw, &tools); err != nil {
			return Example{}, errors.New(`field "tools" is not a list of objects`)
		}
	}
	render := func(ms []tokenizer.Message, gen bool) ([]int32, error) { return chatTokens(text, ms, tools, gen) }
	ids, err := render(msgs, false)
	if err != nil {
		return Example{}, err
	}
	ex := Example{Tokens: ids}
	if mask {
		p, err := render(msgs[:len(msgs)-1], genPrompt)
		if err != nil {
			return Example{}, err
		}
		ex.Offset = len(p)
	}
	return ex, nil
}

// chatTokens renders msgs with the chat template (with the generation
// prompt when gen) and encodes the text without the tokenizer's special
// tokens, as templated does.
func chatTokens(text *chat.Text, msgs []tokenizer.Message, tools []map[string]any, gen bool) ([]int32, error) {
	extra := map[string]any{"enable_thinking": hasThinking(text.Tok)}
	for k, v := range text.Extra {
		extra[k] = v
	}
	s, err := text.Tok.ApplyChatTemplate(msgs, tokenizer.ChatOptions{AddGenerationPrompt: gen, Tools: tools, Extra: extra})
	if err != nil {
		return nil, err
	}
	return text.Tok.EncodeSpecial(s, false), nil
}

// hasThinking is mlx_lm's TokenizerWrapper.has_thinking for the
// single-token thinking modes: a start and end token pair in the
// vocabulary. (mlx_lm's multi-token "<|channel>thought" mode is not
// detected.)
func hasThinking(tok *tokenizer.Tokenizer) bool {
	for _, p := range [][2]string{{"<think>", "</think>"}, {"<longcat_think>", "</longcat_think>"}, {"<|think:start|>", "<|think:end|>"}} {
		_, a := tok.TokenToID(p[0])
		_, b := tok.TokenToID(p[1])
		if a && b {
			return true
		}
	}
	return false
}
