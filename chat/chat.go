// Package chat turns conversations into prompt tokens for a model directory
// and says which tokens end a turn: the tokenizer, the chat template's
// rendering (as mlx_lm and transformers' apply_chat_template render it) and
// the stop tokens gathered from tokenizer_config.json, config.json and
// generation_config.json. Prefix reuse across turns lives with the caches,
// in generate.Session.Reuse.
package chat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/tokenizer"
)

// ErrNoTokenizer is returned (wrapped) by Load when the directory has no
// tokenizer.json.
var ErrNoTokenizer = errors.New("no tokenizer.json")

// Text is a model directory's text side.
type Text struct {
	// Tok is the tokenizer (tokenizer.json, tokenizer_config.json).
	Tok *tokenizer.Tokenizer
	// EOS are the stop tokens (StopTokens).
	EOS []int32
	// Template selects the chat template; false encodes the last message's
	// text as it is (mlx_lm's --ignore-chat-template). Load sets it when
	// the tokenizer has a template.
	Template bool
	// Extra are further template variables, e.g. {"enable_thinking": false}.
	Extra map[string]any
}

// Load loads dir's tokenizer and stop tokens (cfg is dir's config.json).
func Load(dir string, cfg *checkpoint.Config) (*Text, error) {
	if _, err := os.Stat(filepath.Join(dir, "tokenizer.json")); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", dir, ErrNoTokenizer)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		return nil, err
	}
	t := &Text{Tok: tok, Template: tok.HasChatTemplate()}
	if t.EOS, err = StopTokens(dir, cfg, tok); err != nil {
		return nil, err
	}
	return t, nil
}

// HasThinkingSwitch reports whether the chat template mentions
// enable_thinking (MiniCPM5's, Qwen3's), the variable Extra may set.
func (t *Text) HasThinkingSwitch() bool {
	return strings.Contains(t.Tok.Config().ChatTemplate, "enable_thinking")
}

// Render returns the token ids of a conversation: the chat template with
// the assistant's generation prompt, encoded without the tokenizer's own
// special tokens (the template has them), as mlx_lm does; or, without the
// template, the last message's text encoded with them.
func (t *Text) Render(msgs []tokenizer.Message) ([]int32, error) {
	if len(msgs) == 0 {
		return nil, errors.New("chat: no messages to render")
	}
	if !t.Template {
		return t.Tok.Encode(msgs[len(msgs)-1].Content), nil
	}
	text, err := t.Tok.ApplyChatTemplate(msgs, tokenizer.ChatOptions{AddGenerationPrompt: true, Extra: t.Extra})
	if err != nil {
		return nil, err
	}
	return t.Tok.EncodeSpecial(text, false), nil
}

// continueTag marks the end of the final message while rendering with
// ContinueFinal: transformers' CONTINUE_FINAL_MESSAGE_TAG.
const continueTag = "CONTINUE_FINAL_MESSAGE_TAG "

// RenderContinue returns the text of a conversation whose final message is
// left open, without a generation prompt: transformers'
// apply_chat_template(continue_final_message=True,
// add_generation_prompt=False), which mlx_lm's cache_prompt renders. The
// final message's content is marked, the template rendered and the text cut
// at the mark (and right-trimmed when the template trimmed the mark's
// trailing space).
func (t *Text) RenderContinue(msgs []tokenizer.Message) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: no messages to render")
	}
	if !strings.Contains(t.Tok.Config().ChatTemplate, "content") {
		return "", errors.New("chat: the chat template never reads a message's content, so its final message cannot be continued")
	}
	ms := slices.Clone(msgs)
	ms[len(ms)-1].Content += continueTag
	text, err := t.Tok.ApplyChatTemplate(ms, tokenizer.ChatOptions{Extra: t.Extra})
	if err != nil {
		return "", err
	}
	tag := strings.TrimSpace(continueTag)
	at := strings.LastIndex(text, tag)
	if at < 0 || !strings.Contains(text, strings.TrimSpace(msgs[len(msgs)-1].Content)) {
		return "", errors.New("chat: the final message does not appear in the rendered chat template, so it cannot be continued")
	}
	if strings.HasPrefix(text[at:], continueTag) {
		return text[:at], nil
	}
	return strings.TrimRight(text[:at], " \t\n\r\v\f"), nil
}

// RenderAfter returns the text of a conversation with the generation prompt
// from the start of the last message's content on: what follows a cached
// prefix that ends inside that message (mlx_lm.generate with a prompt cache
// renders the conversation with the content "<query>" and keeps the text
// from where "<query>" starts).
func (t *Text) RenderAfter(msgs []tokenizer.Message) (string, error) {
	if len(msgs) == 0 {
		return "", errors.New("chat: no messages to render")
	}
	opts := tokenizer.ChatOptions{AddGenerationPrompt: true, Extra: t.Extra}
	text, err := t.Tok.ApplyChatTemplate(msgs, opts)
	if err != nil {
		return "", err
	}
	probe := slices.Clone(msgs)
	probe[len(probe)-1].Content = "<query>"
	p, err := t.Tok.ApplyChatTemplate(probe, opts)
	if err != nil {
		return "", err
	}
	at := strings.Index(p, "<query>")
	if at < 0 || at > len(text) {
		return "", errors.New("chat: the chat template drops the last message's content, so no suffix can follow a cached prefix")
	}
	return text[at:], nil
}

// StopTokens gathers the stop tokens: tokenizer_config.json's eos_token,
// config.json's eos_token_id and generation_config.json's eos_token_id
// (a number or a list), each once, in that order. A generation_config.json
// that does not parse is ignored, as mlx_lm ignores it
// (checkpoint.LoadConfig returns a warning for it).
func StopTokens(dir string, cfg *checkpoint.Config, tok *tokenizer.Tokenizer) ([]int32, error) {
	var ids []int32
	add := func(id int32) {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	if id, ok := tok.EOS(); ok {
		add(id)
	}
	for _, id := range cfg.EOSTokenIDs {
		add(int32(id))
	}
	path := filepath.Join(dir, "generation_config.json")
	data, err := safefile.ReadFile(path, safefile.MaxJSONBytes)
	if errors.Is(err, fs.ErrNotExist) {
		return ids, nil
	}
	if err != nil {
		return nil, err
	}
	var gc struct {
		EOS json.RawMessage `json:"eos_token_id"`
	}
	if err := json.Unmarshal(data, &gc); err != nil {
		return ids, nil
	}
	if len(gc.EOS) == 0 || string(gc.EOS) == "null" {
		return ids, nil
	}
	var one int32
	var list []int32
	if err := json.Unmarshal(gc.EOS, &one); err == nil {
		list = []int32{one}
	} else if err := json.Unmarshal(gc.EOS, &list); err != nil {
		return nil, fmt.Errorf("%s: eos_token_id is %s, want a token id or a list of them", path, gc.EOS)
	}
	for _, id := range list {
		add(id)
	}
	return ids, nil
}
