package train

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/mlxgo/mlxgo/chat"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// Preference is one line of a preference dataset before tokenization: a
// prompt conversation (its last message the user's) and the chosen and
// rejected assistant replies.
type Preference struct {
	Prompt           []tokenizer.Message
	Chosen, Rejected string
	Source           string // "file:line"
}

// ReadPreferences reads preference lines from r (name is the file's name
// for errors), one JSON object a line, blank lines skipped, in one of
// these forms:
//
//	{"prompt": "...", "chosen": "...", "rejected": "..."}            (optional "system": "...")
//	{"prompt": [messages], "chosen": [messages], "rejected": [messages]}
//	{"chosen": [messages], "rejected": [messages]}
//
// where messages are {"role", "content"} objects. A prompt string is one
// user message (after the system message when given). A chosen or
// rejected list holds one assistant message (a string is one too). With
// no prompt the two conversations must agree on every message but their
// last, an assistant's: those are the prompt (TRL's implicit prompt).
// Each bad line is an error naming the file and line.
func ReadPreferences(r io.Reader, name string) ([]Preference, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	var out []Preference
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		where := fmt.Sprintf("%s:%d", name, line)
		p, err := parsePreference(raw)
		if err != nil {
			return nil, fmt.Errorf("train: %s: %w", where, err)
		}
		p.Source = where
		out = append(out, p)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("train: %s: %w", name, err)
	}
	return out, nil
}

func parsePreference(raw []byte) (Preference, error) {
	var rec map[string]json.RawMessage
	if err := json.Unmarshal(raw, &rec); err != nil {
		return Preference{}, fmt.Errorf("not a JSON object: %w", err)
	}
	for _, k := range []string{"chosen", "rejected"} {
		if rec[k] == nil {
			return Preference{}, fmt.Errorf("no field %q (want prompt, chosen and rejected)", k)
		}
	}
	var p Preference
	if isString(rec["prompt"]) {
		s, _ := str(rec, "prompt")
		if _, ok := rec["system"]; ok {
			sys, err := str(rec, "system")
			if err != nil {
				return Preference{}, err
			}
			p.Prompt = append(p.Prompt, tokenizer.Message{Role: "system", Content: sys})
		}
		p.Prompt = append(p.Prompt, tokenizer.Message{Role: "user", Content: s})
	} else if rec["prompt"] != nil {
		msgs, err := messages(rec["prompt"], "prompt")
		if err != nil {
			return Preference{}, err
		}
		if len(msgs) == 0 {
			return Preference{}, errors.New(`field "prompt" has no messages`)
		}
		p.Prompt = msgs
	}
	var err error
	if rec["prompt"] == nil {
		p.Prompt, p.Chosen, p.Rejected, err = implicitPrompt(rec["chosen"], rec["rejected"])
		if err != nil {
			return Preference{}, err
		}
	} else {
		if p.Chosen, err = reply(rec["chosen"], "chosen"); err != nil {
			return Preference{}, err
		}
		if p.Rejected, err = reply(rec["rejected"], "rejected"); err != nil {
			return Preference{}, err
		}
	}
	if p.Prompt[len(p.Prompt)-1].Role == "assistant" {
		return Preference{}, errors.New("the prompt ends with an assistant message: its last message must be the user's")
	}
	return p, nil
}

func isString(raw json.RawMessage) bool {
	var s string
	return raw != nil && json.Unmarshal(raw, &s) == nil
}

// messages decodes a list of {"role", "content"} string objects.
func messages(raw json.RawMessage, key string) ([]tokenizer.Message, error) {
	var list []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("field %q is neither a string nor a list of messages", key)
	}
	out := make([]tokenizer.Message, len(list))
	for i, m := range list {
		role, err1 := str(m, "role")
		content, err2 := str(m, "content")
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s[%d] needs a string role and a string content", key, i)
		}
		out[i] = tokenizer.Message{Role: role, Content: content}
	}
	return out, nil
}

// reply decodes a response: a string, or a list of one assistant message.
func reply(raw json.RawMessage, key string) (string, error) {
	if isString(raw) {
		var s string
		_ = json.Unmarshal(raw, &s)
		return s, nil
	}
	msgs, err := messages(raw, key)
	if err != nil {
		return "", err
	}
	if len(msgs) != 1 || msgs[0].Role != "assistant" {
		return "", fmt.Errorf("field %q holds %d messages: want one, the assistant's", key, len(msgs))
	}
	return msgs[0].Content, nil
}

// implicitPrompt splits two whole conversations into their shared prompt
// and their last (assistant) messages.
func implicitPrompt(rawC, rawR json.RawMessage) ([]tokenizer.Message, string, string, error) {
	c, err := messages(rawC, "chosen")
	if err != nil {
		return nil, "", "", err
	}
	r, err := messages(rawR, "rejected")
	if err != nil {
		return nil, "", "", err
	}
	if len(c) < 2 || len(r) < 2 {
		return nil, "", "", errors.New(`without "prompt", "chosen" and "rejected" must be whole conversations (the prompt's messages, then the assistant's reply)`)
	}
	if !slices.Equal(c[:len(c)-1], r[:len(r)-1]) {
		return nil, "", "", errors.New(`without "prompt", "chosen" and "rejected" must agree on every message but their last`)
	}
	if c[len(c)-1].Role != "assistant" || r[len(r)-1].Role != "assistant" {
		return nil, "", "", errors.New(`the last messages of "chosen" and "rejected" must be the assistant's`)
	}
	return c[:len(c)-1], c[len(c)-1].Content, r[len(r)-1].Content, nil
}

// Tokenize renders the preference's prompt with the chat template and
// the generation prompt, and its two conversations (the prompt, then each
// reply as the assistant's message) without, as mlx_lm's ChatDataset
// does with --mask-prompt; each response is the rest of its conversation
// after the prompt's tokens. A template whose rendering of a conversation
// does not begin with its rendering of the prompt is an error (the two
// responses would not share the prompt), as is a response of no tokens.
func (p Preference) Tokenize(text *chat.Text) (Pair, error) {
	if !text.Tok.HasChatTemplate() {
		return Pair{}, fmt.Errorf("train: %s: the tokenizer has no chat_template, which preference data needs", p.Source)
	}
	prompt, err := chatTokens(text, p.Prompt, nil, true)
	if err != nil {
		return Pair{}, fmt.Errorf("train: %s: %w", p.Source, err)
	}
	pair := Pair{Prompt: prompt, Source: p.Source}
	for i, resp := range []string{p.Chosen, p.Rejected} {
		msgs := append(slices.Clip(p.Prompt), tokenizer.Message{Role: "assistant", Content: resp})
		all, err := chatTokens(text, msgs, nil, false)
		if err != nil {
			return Pair{}, fmt.Errorf("train: %s: %w", p.Source, err)
		}
		name := [2]string{"chosen", "rejected"}[i]
		if len(all) < len(prompt) || !slices.Equal(all[:len(prompt)], prompt) {
			return Pair{}, fmt.Errorf("train: %s: the chat template's rendering of the conversation with the %s reply does not begin with its rendering of the prompt (with the generation prompt), so the two responses would not share one prompt", p.Source, name)
		}
		if len(all) == len(prompt) {
			return Pair{}, fmt.Errorf("train: %s: the %s reply has no tokens", p.Source, name)
		}
		if i == 0 {
			pair.Chosen = all[len(prompt):]
		} else {
			pair.Rejected = all[len(prompt):]
		}
	}
	if len(prompt) == 0 {
		return Pair{}, fmt.Errorf("train: %s: the prompt has no tokens", p.Source)
	}
	return pair, nil
}

// LoadPreferenceFile reads and tokenizes one preference .jsonl file (see
// ReadPreferences and Preference.Tokenize). A pair longer than maxSeq
// tokens (its prompt and both responses, the prefix-shared sequence) is
// an error naming its line. The error wraps fs.ErrNotExist when the file
// is missing.
func LoadPreferenceFile(path string, text *chat.Text, maxSeq int) ([]Pair, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	defer f.Close()
	prefs, err := ReadPreferences(f, path)
	if err != nil {
		return nil, err
	}
	out := make([]Pair, 0, len(prefs))
	for _, p := range prefs {
		pair, err := p.Tokenize(text)
		if err != nil {
			return nil, err
		}
		if n := pair.Layout().T(); maxSeq > 0 && n > maxSeq {
			return nil, fmt.Errorf("train: %s: the prompt and both responses are %d tokens, over --max-seq-length %d", p.Source, n, maxSeq)
		}
		out = append(out, pair)
	}
	return out, nil
}

// LoadPreferenceDir reads dir/train.jsonl, dir/valid.jsonl and
// dir/test.jsonl as preference files; a missing file is an empty set.
func LoadPreferenceDir(dir string, text *chat.Text, maxSeq int) (trainSet, valid, test []Pair, err error) {
	if st, err := os.Stat(dir); err != nil {
		return nil, nil, nil, fmt.Errorf("train: data: %w", err)
	} else if !st.IsDir() {
		return nil, nil, nil, fmt.Errorf("train: data %s is not a directory (want one with train.jsonl, valid.jsonl, test.jsonl)", dir)
	}
	sets := make([][]Pair, 3)
	for i, n := range []string{"train", "valid", "test"} {
		sets[i], err = LoadPreferenceFile(filepath.Join(dir, n+".jsonl"), text, maxSeq)
		if errors.Is(err, fs.ErrNotExist) {
			sets[i], err = nil, nil
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	return sets[0], sets[1], sets[2], nil
}
