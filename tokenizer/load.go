package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/mlxgo/mlxgo/internal/safefile"
)

// Tokenizer encodes and decodes text with one Hugging Face tokenizer. It is safe for
// concurrent use.
type Tokenizer struct {
	file string // tokenizer.json path, for messages

	model      *bpe
	normalizer normalizer
	pre        preTokenizer
	decoder    decoder
	post       postProcessor

	added     []addedToken // in id order
	addedByID map[int32]*addedToken
	rawSplit  *addedMatcher // added tokens with normalized=false
	normSplit *addedMatcher // added tokens with normalized=true
	vocabSize int
	idToToken []string // every id below vocabSize; "" where there is none
	tokenToID map[string]int32

	config Config

	byteFallbackDecode bool // the decoder chain has ByteFallback
}

// Config is what this package reads from tokenizer_config.json.
type Config struct {
	BOSToken     string // "" when absent
	EOSToken     string
	UnkToken     string
	PadToken     string
	AddBOS       *bool // add_bos_token; nil when absent
	AddEOS       *bool // add_eos_token; nil when absent
	ChatTemplate string
}

type rawTokenizer struct {
	AddedTokens   []rawAdded      `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	Model         json.RawMessage `json:"model"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
}

type rawAdded struct {
	ID         int32  `json:"id"`
	Content    string `json:"content"`
	SingleWord bool   `json:"single_word"`
	LStrip     bool   `json:"lstrip"`
	RStrip     bool   `json:"rstrip"`
	Normalized bool   `json:"normalized"`
	Special    bool   `json:"special"`
}

// Load reads dir/tokenizer.json and, when present, dir/tokenizer_config.json.
func Load(dir string) (*Tokenizer, error) {
	cfg := filepath.Join(dir, "tokenizer_config.json")
	if _, err := os.Stat(cfg); errors.Is(err, fs.ErrNotExist) {
		cfg = ""
	}
	return LoadFiles(filepath.Join(dir, "tokenizer.json"), cfg)
}

// LoadFiles reads a tokenizer.json and a tokenizer_config.json (configPath may be "").
func LoadFiles(tokenizerPath, configPath string) (*Tokenizer, error) {
	data, err := safefile.ReadFile(tokenizerPath, safefile.MaxTokenizerBytes)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	var cfgData []byte
	if configPath != "" {
		if cfgData, err = safefile.ReadFile(configPath, safefile.MaxJSONBytes); err != nil {
			return nil, fmt.Errorf("tokenizer: %w", err)
		}
	}
	return New(data, cfgData, tokenizerPath, configPath)
}

// New builds a Tokenizer from the bytes of a tokenizer.json and of a tokenizer_config.json
// (nil when there is none). The names are used in error messages only.
func New(tokenizerJSON, configJSON []byte, tokenizerName, configName string) (*Tokenizer, error) {
	var raw rawTokenizer
	if err := json.Unmarshal(tokenizerJSON, &raw); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: not a valid tokenizer.json: %w", tokenizerName, err)
	}
	errf := func(err error) error { return fmt.Errorf("tokenizer: %s: %w", tokenizerName, err) }
	t := &Tokenizer{file: tokenizerName}
	var err error
	if t.model, err = parseModel(raw.Model); err != nil {
		return nil, errf(err)
	}
	if t.normalizer, err = parseNormalizer(raw.Normalizer); err != nil {
		return nil, errf(err)
	}
	if t.pre, err = parsePreTokenizer(raw.PreTokenizer); err != nil {
		return nil, errf(err)
	}
	if t.decoder, err = parseDecoder(raw.Decoder); err != nil {
		return nil, errf(err)
	}
	t.byteFallbackDecode = hasByteFallback(t.decoder)
	if err := t.setAdded(raw.AddedTokens); err != nil {
		return nil, errf(err)
	}
	if t.vocabSize == 0 {
		// Every text would encode to no tokens (reported downstream as an empty prompt).
		return nil, errf(errors.New("the vocabulary is empty (model.vocab and added_tokens hold no token)"))
	}
	if t.post, err = parsePostProcessor(raw.PostProcessor); err != nil {
		return nil, errf(err)
	}
	if configJSON != nil {
		if t.config, err = parseConfig(configJSON); err != nil {
			return nil, fmt.Errorf("tokenizer: %s: %w", configName, err)
		}
		// An eos_token the vocabulary lacks can never be generated, so generation would
		// never stop on it (transformers adds it as a new token the model cannot produce).
		if e := t.config.EOSToken; e != "" {
			if _, ok := t.tokenToID[e]; !ok {
				return nil, fmt.Errorf("tokenizer: %s: field \"eos_token\": %q is not in the vocabulary of %s", configName, e, tokenizerName)
			}
		}
	}
	return t, nil
}

// maxIDGap bounds the ids a tokenizer.json leaves unused (real ones leave none): the id table
// is sized by the largest id, which a corrupt file could set to 2^31.
const maxIDGap = 1 << 20

func (t *Tokenizer) setAdded(raws []rawAdded) error {
	t.addedByID = map[int32]*addedToken{}
	t.tokenToID = map[string]int32{}
	n := len(t.model.idToToken)
	for _, r := range raws {
		if r.ID < 0 {
			return fmt.Errorf("added_tokens: %q has negative id %d", r.Content, r.ID)
		}
		if r.Content == "" {
			return fmt.Errorf("added_tokens: id %d has empty content", r.ID)
		}
		if int(r.ID) >= n {
			n = int(r.ID) + 1
		}
	}
	if int64(n) > int64(len(t.model.idToToken))+int64(len(raws))+maxIDGap {
		return fmt.Errorf("added_tokens: id %d is far beyond the %d vocabulary and %d added tokens (ids may leave at most %d unused)", n-1, len(t.model.idToToken), len(raws), maxIDGap)
	}
	sort.SliceStable(raws, func(i, j int) bool { return raws[i].ID < raws[j].ID })
	t.added = make([]addedToken, len(raws))
	for i, r := range raws {
		t.added[i] = addedToken{id: r.ID, content: r.Content, singleWord: r.SingleWord, lstrip: r.LStrip,
			rstrip: r.RStrip, normalized: r.Normalized, special: r.Special}
		t.addedByID[r.ID] = &t.added[i]
	}
	t.vocabSize = n
	t.idToToken = make([]string, n)
	for id, s := range t.model.idToToken {
		t.idToToken[id] = s
		t.tokenToID[s] = int32(id)
	}
	for i := range t.added {
		a := &t.added[i]
		t.idToToken[a.id] = a.content
		t.tokenToID[a.content] = a.id
	}
	var raw, norm []*addedToken
	for i := range t.added {
		if t.added[i].normalized {
			norm = append(norm, &t.added[i])
		} else {
			raw = append(raw, &t.added[i])
		}
	}
	t.rawSplit = newAddedMatcher(raw)
	t.normSplit = newAddedMatcher(norm)
	return nil
}

func parseConfig(data []byte) (Config, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return Config{}, fmt.Errorf("not a valid tokenizer_config.json: %w", err)
	}
	var c Config
	for key, dst := range map[string]*string{"bos_token": &c.BOSToken, "eos_token": &c.EOSToken,
		"unk_token": &c.UnkToken, "pad_token": &c.PadToken} {
		s, err := configToken(raw[key])
		if err != nil {
			return Config{}, fmt.Errorf("field %q: %w", key, err)
		}
		*dst = s
	}
	for key, dst := range map[string]**bool{"add_bos_token": &c.AddBOS, "add_eos_token": &c.AddEOS} {
		if v, ok := raw[key]; ok && string(v) != "null" {
			var b bool
			if err := json.Unmarshal(v, &b); err != nil {
				return Config{}, fmt.Errorf("field %q: want true or false, got %s", key, v)
			}
			*dst = &b
		}
	}
	if v, ok := raw["chat_template"]; ok && string(v) != "null" {
		tpl, err := configTemplate(v)
		if err != nil {
			return Config{}, fmt.Errorf("field \"chat_template\": %w", err)
		}
		c.ChatTemplate = tpl
	}
	return c, nil
}

// configToken reads a special-token field: a string, an AddedToken object {"content": ...}, or null.
func configToken(v json.RawMessage) (string, error) {
	if v == nil || string(v) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(v, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with \"content\", got %.60s", v)
	}
	return *obj.Content, nil
}

// configTemplate reads chat_template: a string, or a list of {"name", "template"} of which
// the one named "default" is used.
func configTemplate(v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var list []struct {
		Name     *string `json:"name"`
		Template *string `json:"template"`
	}
	if err := json.Unmarshal(v, &list); err != nil {
		return "", fmt.Errorf("want a string or a list of {\"name\", \"template\"}: %w", err)
	}
	for i, e := range list {
		if e.Name == nil {
			return "", fmt.Errorf("entry %d has no \"name\"", i)
		}
		if *e.Name == "default" {
			if e.Template == nil || *e.Template == "" {
				// transformers indexes the entry's "template" and fails; running the prompt
				// without a template would be a silent change of the model's input.
				return "", fmt.Errorf("the entry named \"default\" has no \"template\"")
			}
			return *e.Template, nil
		}
	}
	return "", fmt.Errorf("a list of %d named templates without one named \"default\"", len(list))
}

// componentType reads the "type" field of a component object.
func componentType(raw json.RawMessage, what string) (string, map[string]json.RawMessage, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", nil, fmt.Errorf("%s: want a JSON object: %w", what, err)
	}
	var typ string
	if v, ok := obj["type"]; ok {
		if err := json.Unmarshal(v, &typ); err != nil {
			return "", nil, fmt.Errorf("%s: field \"type\": want a string, got %s", what, v)
		}
	}
	return typ, obj, nil
}

// field decodes obj[key] into dst when present and not null.
func field(obj map[string]json.RawMessage, key, what string, dst any) error {
	v, ok := obj[key]
	if !ok || string(v) == "null" {
		return nil
	}
	if err := json.Unmarshal(v, dst); err != nil {
		return fmt.Errorf("%s: field %q: %w", what, key, err)
	}
	return nil
}

func isNull(raw json.RawMessage) bool {
	return len(raw) == 0 || string(raw) == "null"
}

// Config returns what was read from tokenizer_config.json.
func (t *Tokenizer) Config() Config { return t.config }

// VocabSize is one more than the largest id (model vocabulary and added tokens).
func (t *Tokenizer) VocabSize() int { return t.vocabSize }

// TokenToID returns the id of a token string (model vocabulary or added token).
func (t *Tokenizer) TokenToID(token string) (int32, bool) {
	id, ok := t.tokenToID[token]
	return id, ok
}

// IDToToken returns the token string of an id.
func (t *Tokenizer) IDToToken(id int32) (string, bool) {
	if id < 0 || int(id) >= len(t.idToToken) || t.idToToken[id] == "" {
		return "", false
	}
	return t.idToToken[id], true
}

// IsSpecial reports whether id is an added token marked special.
func (t *Tokenizer) IsSpecial(id int32) bool {
	a, ok := t.addedByID[id]
	return ok && a.special
}

// BOS returns the id of tokenizer_config.json's bos_token.
func (t *Tokenizer) BOS() (int32, bool) { return t.TokenToID(t.config.BOSToken) }

// EOS returns the id of tokenizer_config.json's eos_token.
func (t *Tokenizer) EOS() (int32, bool) { return t.TokenToID(t.config.EOSToken) }

// parseSequence parses the list under key of a "Sequence" component with
// parse, dropping the components parse returns as nil (no-ops).
func parseSequence[T any](obj map[string]json.RawMessage, key, what string, parse func(json.RawMessage) (T, error)) ([]T, error) {
	var list []json.RawMessage
	if err := field(obj, key, what, &list); err != nil {
		return nil, err
	}
	var seq []T
	for _, r := range list {
		c, err := parse(r)
		if err != nil {
			return nil, err
		}
		if any(c) != nil {
			seq = append(seq, c)
		}
	}
	return seq, nil
}
