package tokenizer

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Decode returns the text of ids, special tokens included, as tokenizers' decode(ids).
// Ids the tokenizer does not know are skipped.
func (t *Tokenizer) Decode(ids []int32) string { return t.decode(ids, false) }

// DecodeSkipSpecial is Decode without the special tokens (decode(ids, skip_special_tokens=True)).
func (t *Tokenizer) DecodeSkipSpecial(ids []int32) string { return t.decode(ids, true) }

func (t *Tokenizer) decode(ids []int32, skipSpecial bool) string {
	tokens := make([]string, 0, len(ids))
	for _, id := range ids {
		s, ok := t.IDToToken(id)
		if !ok || skipSpecial && t.IsSpecial(id) {
			continue
		}
		tokens = append(tokens, s)
	}
	if t.decoder == nil {
		return strings.Join(tokens, " ")
	}
	return strings.Join(t.decoder.decode(tokens), "")
}

// decoder is one "decoder" component: tokenizers' decode_chain, token strings in and out.
type decoder interface {
	decode(tokens []string) []string
}

type seqDecoder []decoder

func (q seqDecoder) decode(tokens []string) []string {
	for _, d := range q {
		tokens = d.decode(tokens)
	}
	return tokens
}

// byteLevelDecoder maps byte-level characters back to bytes and decodes them as UTF-8,
// invalid sequences becoming U+FFFD. A token with a character outside the table is taken as
// its own UTF-8 bytes.
type byteLevelDecoder struct{}

func (byteLevelDecoder) decode(tokens []string) []string {
	var buf []byte
	for _, tok := range tokens {
		start := len(buf)
		for _, r := range tok {
			b, ok := runeToByte[r]
			if !ok {
				buf = append(buf[:start], tok...)
				break
			}
			buf = append(buf, b)
		}
	}
	return []string{lossyUTF8(buf)}
}

// byteFallbackDecoder turns runs of <0xNN> tokens into their bytes: the text when they are
// valid UTF-8, else one U+FFFD per byte.
type byteFallbackDecoder struct{}

func byteToken(s string) (byte, bool) {
	if len(s) != 6 || !strings.HasPrefix(s, "<0x") || s[5] != '>' {
		return 0, false
	}
	var v byte
	for _, c := range []byte(s[3:5]) {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | (c - '0')
		case c >= 'A' && c <= 'F':
			v = v<<4 | (c - 'A' + 10)
		case c >= 'a' && c <= 'f':
			v = v<<4 | (c - 'a' + 10)
		default:
			return 0, false
		}
	}
	return v, true
}

func (byteFallbackDecoder) decode(tokens []string) []string {
	out := make([]string, 0, len(tokens))
	var pending []byte
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if utf8.Valid(pending) {
			out = append(out, string(pending))
		} else {
			for range pending {
				out = append(out, "\uFFFD")
			}
		}
		pending = pending[:0]
	}
	for _, tok := range tokens {
		if b, ok := byteToken(tok); ok {
			pending = append(pending, b)
			continue
		}
		flush()
		out = append(out, tok)
	}
	flush()
	return out
}

func hasByteFallback(d decoder) bool {
	switch x := d.(type) {
	case byteFallbackDecoder:
		return true
	case seqDecoder:
		for _, y := range x {
			if hasByteFallback(y) {
				return true
			}
		}
	}
	return false
}

type fuseDecoder struct{}

func (fuseDecoder) decode(tokens []string) []string { return []string{strings.Join(tokens, "")} }

type replaceDecoder struct{ from, to string }

func (d replaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		if d.from == "" {
			out[i] = tok
		} else {
			out[i] = strings.ReplaceAll(tok, d.from, d.to)
		}
	}
	return out
}

// stripDecoder removes up to start leading and stop trailing copies of content from every token.
type stripDecoder struct {
	content     rune
	start, stop int
}

func (d stripDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		rs := []rune(tok)
		a, b := 0, len(rs)
		for a < d.start && a < b && rs[a] == d.content {
			a++
		}
		for n := 0; n < d.stop && b > a && rs[b-1] == d.content; n++ {
			b--
		}
		out[i] = string(rs[a:b])
	}
	return out
}

// metaspaceDecoder turns the replacement back into spaces. In the first token, unless the
// prepend scheme is "never", tokenizers drops every replacement character, not only the
// leading one; so does this.
type metaspaceDecoder struct{ m metaspacePre }

func (d metaspaceDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		rep := " "
		if i == 0 && d.m.scheme != "never" {
			rep = ""
		}
		out[i] = strings.ReplaceAll(tok, d.m.repl, rep)
	}
	return out
}

// bpeDecoder replaces the end-of-word suffix with a space (nothing on the last token).
type bpeDecoder struct{ suffix string }

func (d bpeDecoder) decode(tokens []string) []string {
	out := make([]string, len(tokens))
	for i, tok := range tokens {
		rep := " "
		if i == len(tokens)-1 {
			rep = ""
		}
		out[i] = strings.ReplaceAll(tok, d.suffix, rep)
	}
	return out
}

func parseDecoder(raw json.RawMessage) (decoder, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, obj, err := componentType(raw, "decoder")
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("decoder %q", typ)
	switch typ {
	case "Sequence":
		seq, err := parseSequence(obj, "decoders", what, parseDecoder)
		return seqDecoder(seq), err
	case "ByteLevel":
		return byteLevelDecoder{}, nil
	case "ByteFallback":
		return byteFallbackDecoder{}, nil
	case "Fuse":
		return fuseDecoder{}, nil
	case "Replace":
		r, err := parseReplace(obj, what)
		if err != nil {
			return nil, err
		}
		if r.re != nil {
			return nil, fmt.Errorf("%s: a regex pattern is not supported in the decoder", what)
		}
		return replaceDecoder{from: r.literal, to: r.content}, nil
	case "Strip":
		var s struct {
			Content string `json:"content"`
			Start   int    `json:"start"`
			Stop    int    `json:"stop"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		if utf8.RuneCountInString(s.Content) != 1 {
			return nil, fmt.Errorf("%s: content %q must be one character", what, s.Content)
		}
		r, _ := utf8.DecodeRuneInString(s.Content)
		return stripDecoder{content: r, start: s.Start, stop: s.Stop}, nil
	case "Metaspace":
		m, err := parseMetaspace(obj, what)
		if err != nil {
			return nil, err
		}
		return metaspaceDecoder{m}, nil
	case "BPEDecoder":
		d := bpeDecoder{suffix: "</w>"}
		if err := field(obj, "suffix", what, &d.suffix); err != nil {
			return nil, err
		}
		return d, nil
	}
	return nil, fmt.Errorf("unsupported decoder type %q", typ)
}

// lossyUTF8 decodes b as Rust's String::from_utf8_lossy and Python's "replace" do: every
// maximal prefix of an invalid sequence becomes one U+FFFD.
func lossyUTF8(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	var sb strings.Builder
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if r != utf8.RuneError || w > 1 {
			sb.Write(b[i : i+w])
			i += w
			continue
		}
		sb.WriteRune(utf8.RuneError)
		i += invalidPrefix(b[i:])
	}
	return sb.String()
}

// invalidPrefix is the length of the maximal prefix of b (which starts an invalid sequence)
// that could begin a valid one: the lead byte plus its valid continuation bytes.
func invalidPrefix(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		if b[n] < lo || b[n] > hi {
			break
		}
		n++
		lo, hi = 0x80, 0xBF
	}
	return n
}
