package tokenizer

import (
	"encoding/json"
	"fmt"
)

// Encode returns the ids of text with the special tokens tokenizer.json's post-processor adds,
// as tokenizers' encode(text, add_special_tokens=True) and transformers 5 do. Like them, it
// ignores tokenizer_config.json's add_bos_token / add_eos_token (Config reports them).
func (t *Tokenizer) Encode(text string) []int32 { return t.EncodeSpecial(text, true) }

// EncodeSpecial is Encode with the choice of adding special tokens. Special tokens written in
// the text are always recognised.
func (t *Tokenizer) EncodeSpecial(text string, addSpecial bool) []int32 {
	ids := t.encodeText(text)
	if addSpecial {
		ids = t.addSpecial(ids)
	}
	return ids
}

func (t *Tokenizer) encodeText(text string) []int32 {
	segs := t.rawSplit.split(nil, text, true)
	var ids []int32
	emit := func(w piece) { ids = t.model.tokenizePiece(ids, w) }
	for _, sg := range segs {
		if sg.id >= 0 {
			ids = append(ids, sg.id)
			continue
		}
		s := sg.text
		if t.normalizer != nil {
			s = t.normalizer.normalize(s)
		}
		for _, ns := range t.normSplit.split(nil, s, sg.first) {
			if ns.id >= 0 {
				ids = append(ids, ns.id)
				continue
			}
			if ns.text == "" {
				continue
			}
			p := piece{s: ns.text, first: ns.first}
			if t.pre != nil {
				t.pre.split(p, emit)
			} else {
				emit(p)
			}
		}
	}
	return ids
}

func (t *Tokenizer) addSpecial(ids []int32) []int32 {
	if t.post != nil {
		return t.post.process(ids)
	}
	return ids
}

// postProcessor is one "post_processor" component, for a single sequence.
type postProcessor interface {
	process(ids []int32) []int32
}

type seqPost []postProcessor

func (q seqPost) process(ids []int32) []int32 {
	for _, p := range q {
		ids = p.process(ids)
	}
	return ids
}

type noPost struct{}

func (noPost) process(ids []int32) []int32 { return ids }

// templatePost is TemplateProcessing's "single" template: special tokens around $A.
type templatePost struct {
	before, after []int32
}

func (p templatePost) process(ids []int32) []int32 {
	out := make([]int32, 0, len(p.before)+len(ids)+len(p.after))
	out = append(out, p.before...)
	out = append(out, ids...)
	return append(out, p.after...)
}

func parsePostProcessor(raw json.RawMessage) (postProcessor, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, obj, err := componentType(raw, "post_processor")
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("post_processor %q", typ)
	switch typ {
	case "Sequence":
		seq, err := parseSequence(obj, "processors", what, parsePostProcessor)
		return seqPost(seq), err
	case "ByteLevel":
		return noPost{}, nil // only adjusts offsets
	case "TemplateProcessing":
		var tp struct {
			Single []struct {
				SpecialToken *struct {
					ID string `json:"id"`
				} `json:"SpecialToken"`
				Sequence *struct {
					ID string `json:"id"`
				} `json:"Sequence"`
			} `json:"single"`
			SpecialTokens map[string]struct {
				IDs []int32 `json:"ids"`
			} `json:"special_tokens"`
		}
		if err := json.Unmarshal(raw, &tp); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var p templatePost
		seen := false
		for _, item := range tp.Single {
			switch {
			case item.Sequence != nil:
				if item.Sequence.ID != "A" || seen {
					return nil, fmt.Errorf("%s: single template: want one sequence $A, got %q", what, item.Sequence.ID)
				}
				seen = true
			case item.SpecialToken != nil:
				st, ok := tp.SpecialTokens[item.SpecialToken.ID]
				if !ok {
					return nil, fmt.Errorf("%s: special token %q is not in special_tokens", what, item.SpecialToken.ID)
				}
				if seen {
					p.after = append(p.after, st.IDs...)
				} else {
					p.before = append(p.before, st.IDs...)
				}
			default:
				return nil, fmt.Errorf("%s: single template: an item that is neither SpecialToken nor Sequence", what)
			}
		}
		if !seen {
			return nil, fmt.Errorf("%s: single template has no $A", what)
		}
		return p, nil
	case "BertProcessing", "RobertaProcessing":
		var bp struct {
			Sep []json.RawMessage `json:"sep"`
			Cls []json.RawMessage `json:"cls"`
		}
		if err := json.Unmarshal(raw, &bp); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		var sep, cls int32
		if len(bp.Sep) != 2 || len(bp.Cls) != 2 || json.Unmarshal(bp.Sep[1], &sep) != nil || json.Unmarshal(bp.Cls[1], &cls) != nil {
			return nil, fmt.Errorf("%s: want \"sep\" and \"cls\" as [token, id]", what)
		}
		return templatePost{before: []int32{cls}, after: []int32{sep}}, nil
	}
	return nil, fmt.Errorf("unsupported post_processor type %q", typ)
}
