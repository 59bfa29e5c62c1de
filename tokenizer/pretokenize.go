package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// piece is one split of the text on its way to the model.
type piece struct {
	s     string
	first bool // begins at offset 0 of the original text (Metaspace's prepend_scheme "first")
	raw   bool // ByteLevel's byte-to-character mapping is still to be applied to s
}

// text returns the piece's string with any pending byte-level mapping applied.
func (p piece) text() string {
	if p.raw {
		return byteLevelEncode(p.s)
	}
	return p.s
}

// preTokenizer is one "pre_tokenizer" component of tokenizer.json. split calls emit for
// every piece p splits into, in order.
type preTokenizer interface {
	split(p piece, emit func(piece))
}

type seqPre []preTokenizer

func (q seqPre) split(p piece, emit func(piece)) {
	q.run(0, p, emit)
}

func (q seqPre) run(i int, p piece, emit func(piece)) {
	if i == len(q) {
		emit(p)
		return
	}
	if p.raw { // a later stage needs the mapped text
		p = piece{s: p.text(), first: p.first}
	}
	q[i].split(p, func(c piece) { q.run(i+1, c, emit) })
}

// span is a half-open byte range of a piece and whether the pattern matched it.
type span struct {
	start, end int
	match      bool
}

type behavior int

const (
	removed behavior = iota
	isolated
	mergedWithPrevious
	mergedWithNext
	contiguous
)

var behaviors = map[string]behavior{"Removed": removed, "Isolated": isolated,
	"MergedWithPrevious": mergedWithPrevious, "MergedWithNext": mergedWithNext, "Contiguous": contiguous}

// applyBehavior turns the spans covering p into pieces, as tokenizers' SplitDelimiterBehavior does.
func applyBehavior(p piece, spans []span, b behavior, emit func(piece)) {
	var out []span
	prev := false
	switch b {
	case removed:
		for _, s := range spans {
			if !s.match {
				out = append(out, s)
			}
		}
	case isolated:
		out = spans
	case mergedWithPrevious:
		for _, s := range spans {
			if s.match && !prev && len(out) > 0 {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prev = s.match
		}
	case mergedWithNext:
		for i := len(spans) - 1; i >= 0; i-- {
			s := spans[i]
			if s.match && !prev && len(out) > 0 {
				out[len(out)-1].start = s.start
			} else {
				out = append(out, s)
			}
			prev = s.match
		}
		for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
			out[i], out[j] = out[j], out[i]
		}
	case contiguous:
		for i, s := range spans {
			if i > 0 && s.match == prev {
				out[len(out)-1].end = s.end
			} else {
				out = append(out, s)
			}
			prev = s.match
		}
	}
	for _, s := range out {
		if s.end > s.start {
			emit(piece{s: p.s[s.start:s.end], first: p.first && s.start == 0})
		}
	}
}

// matchSpans turns non-overlapping matches into spans covering all of s.
func matchSpans(s string, matches [][2]int, invert bool) []span {
	var spans []span
	at := 0
	for _, m := range matches {
		if m[0] > at {
			spans = append(spans, span{at, m[0], invert})
		}
		if m[1] > m[0] {
			spans = append(spans, span{m[0], m[1], !invert})
		}
		at = m[1]
	}
	if at < len(s) {
		spans = append(spans, span{at, len(s), invert})
	}
	return spans
}

// runeSpans marks every rune for which f holds as its own matching span; runs of other runes
// form one non-matching span.
func runeSpans(s string, f func(rune) bool) []span {
	var spans []span
	start := 0
	for i, r := range s {
		if f(r) {
			if i > start {
				spans = append(spans, span{start, i, false})
			}
			n := utf8.RuneLen(r)
			if r == utf8.RuneError {
				_, n = utf8.DecodeRuneInString(s[i:])
			}
			spans = append(spans, span{i, i + n, true})
			start = i + n
		}
	}
	if start < len(s) {
		spans = append(spans, span{start, len(s), false})
	}
	return spans
}

// splitPre is the Split pre-tokenizer.
type splitPre struct {
	find     func(s string) [][2]int
	next     func(s string, i int) int // the scanner of a tiling pattern, or nil
	behavior behavior
	invert   bool
}

func (x splitPre) split(p piece, emit func(piece)) {
	if x.next != nil && x.behavior == isolated && !x.invert {
		// Fast path: the matches tile the string, so every match is a piece.
		for i := 0; i < len(p.s); {
			end := x.next(p.s, i)
			emit(piece{s: p.s[i:end], first: p.first && i == 0})
			i = end
		}
		return
	}
	applyBehavior(p, matchSpans(p.s, x.find(p.s), x.invert), x.behavior, emit)
}

// digitsPre isolates numeric characters (unicode.IsNumber, Rust's char::is_numeric): each
// one alone when individual, else runs of them.
type digitsPre struct{ individual bool }

func (x digitsPre) split(p piece, emit func(piece)) {
	s := p.s
	start := 0
	inDigits := false
	for i := 0; i < len(s); {
		r, w := runeAt(s, i)
		d := unicode.IsNumber(r)
		if i > start && (d != inDigits || d && x.individual) {
			emit(piece{s: s[start:i], first: p.first && start == 0})
			start = i
		}
		inDigits = d
		i += w
	}
	if start < len(s) {
		emit(piece{s: s[start:], first: p.first && start == 0})
	}
}

type whitespaceSplitPre struct{}

func (whitespaceSplitPre) split(p piece, emit func(piece)) {
	applyBehavior(p, runeSpans(p.s, unicode.IsSpace), removed, emit)
}

// metaspacePre replaces spaces with the replacement, prepends it as the scheme says, and splits
// before every replacement character.
type metaspacePre struct {
	repl    string
	scheme  string // "always", "first" or "never"
	splitOn bool
}

func (x metaspacePre) split(p piece, emit func(piece)) {
	if p.s == "" {
		return
	}
	s := strings.ReplaceAll(p.s, " ", x.repl)
	if !strings.HasPrefix(s, x.repl) && (x.scheme == "always" || x.scheme == "first" && p.first) {
		s = x.repl + s
	}
	q := piece{s: s, first: p.first}
	if !x.splitOn {
		emit(q)
		return
	}
	r, _ := utf8.DecodeRuneInString(x.repl)
	applyBehavior(q, runeSpans(s, func(c rune) bool { return c == r }), mergedWithNext, emit)
}

// byteLevelPre splits with the GPT-2 regex (when useRegex) and maps every byte to its
// printable stand-in character.
type byteLevelPre struct {
	prefixSpace bool
	useRegex    bool
}

// The pieces it emits are raw: the mapping is applied when their text is needed, so that the
// model's cache can be looked up without building the mapped string.
func (x byteLevelPre) split(p piece, emit func(piece)) {
	s := p.s
	if x.prefixSpace && !strings.HasPrefix(s, " ") {
		s = " " + s
	}
	if !x.useRegex {
		if s != "" {
			emit(piece{s: s, first: p.first, raw: true})
		}
		return
	}
	for i := 0; i < len(s); {
		end := gpt2Next(s, i)
		emit(piece{s: s[i:end], first: p.first && i == 0, raw: true})
		i = end
	}
}

// Patterns the hand-written scanners implement (pretokenize_regex.go), as tokenizer.json spells them.
const (
	gpt2Pattern   = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`
	llama3Pattern = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
	qwen2Pattern  = `(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`
)

// patternScanner returns the hand-written scanner of a tiling Split pattern, or nil.
func patternScanner(re string) func(s string, i int) int {
	switch re {
	case gpt2Pattern:
		return gpt2Next
	case llama3Pattern:
		return func(s string, i int) int { return llama3Next(s, i, 3) }
	case qwen2Pattern:
		return func(s string, i int) int { return llama3Next(s, i, 1) }
	}
	return nil
}

// patternFinder returns the match finder of a Split pattern.
func patternFinder(literal, re string, isRegex bool, what string) (func(string) [][2]int, error) {
	if !isRegex {
		if literal == "" {
			return func(string) [][2]int { return nil }, nil
		}
		return func(s string) [][2]int {
			var out [][2]int
			for at := 0; ; {
				i := strings.Index(s[at:], literal)
				if i < 0 {
					return out
				}
				out = append(out, [2]int{at + i, at + i + len(literal)})
				at += i + len(literal)
			}
		}, nil
	}
	switch re {
	case gpt2Pattern:
		return gpt2Split, nil
	case llama3Pattern:
		return func(s string) [][2]int { return llama3Split(s, 3) }, nil
	case qwen2Pattern:
		return func(s string) [][2]int { return llama3Split(s, 1) }, nil
	}
	c, err := regexp.Compile(re)
	if err != nil {
		return nil, fmt.Errorf("%s: regex %q is not supported (Go regexp: %v; the GPT-2, Llama-3 and Qwen2 patterns have scanners of their own)", what, re, err)
	}
	return func(s string) [][2]int {
		var out [][2]int
		for _, m := range c.FindAllStringIndex(s, -1) {
			out = append(out, [2]int{m[0], m[1]})
		}
		return out
	}, nil
}

func parsePreTokenizer(raw json.RawMessage) (preTokenizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, obj, err := componentType(raw, "pre_tokenizer")
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("pre_tokenizer %q", typ)
	switch typ {
	case "Sequence":
		seq, err := parseSequence(obj, "pretokenizers", what, parsePreTokenizer)
		return seqPre(seq), err
	case "ByteLevel":
		x := byteLevelPre{useRegex: true}
		if err := field(obj, "add_prefix_space", what, &x.prefixSpace); err != nil {
			return nil, err
		}
		if err := field(obj, "use_regex", what, &x.useRegex); err != nil {
			return nil, err
		}
		return x, nil
	case "Split":
		lit, re, isRe, err := parsePattern(obj, what)
		if err != nil {
			return nil, err
		}
		x := splitPre{}
		if x.find, err = patternFinder(lit, re, isRe, what); err != nil {
			return nil, err
		}
		if isRe {
			x.next = patternScanner(re)
		}
		var b string
		if err := field(obj, "behavior", what, &b); err != nil {
			return nil, err
		}
		bh, ok := behaviors[b]
		if !ok {
			return nil, fmt.Errorf("%s: unknown behavior %q", what, b)
		}
		x.behavior = bh
		if err := field(obj, "invert", what, &x.invert); err != nil {
			return nil, err
		}
		return x, nil
	case "Digits":
		var x digitsPre
		if err := field(obj, "individual_digits", what, &x.individual); err != nil {
			return nil, err
		}
		return x, nil
	case "WhitespaceSplit":
		return whitespaceSplitPre{}, nil
	case "Metaspace":
		x, err := parseMetaspace(obj, what)
		if err != nil {
			return nil, err
		}
		return x, nil
	}
	return nil, fmt.Errorf("unsupported pre_tokenizer type %q", typ)
}

// parseMetaspace reads a Metaspace pre-tokenizer or decoder, current or legacy (add_prefix_space).
func parseMetaspace(obj map[string]json.RawMessage, what string) (metaspacePre, error) {
	x := metaspacePre{repl: "\u2581", scheme: "always", splitOn: true}
	if err := field(obj, "replacement", what, &x.repl); err != nil {
		return x, err
	}
	if utf8.RuneCountInString(x.repl) != 1 {
		return x, fmt.Errorf("%s: replacement %q must be one character", what, x.repl)
	}
	if _, ok := obj["prepend_scheme"]; ok {
		if err := field(obj, "prepend_scheme", what, &x.scheme); err != nil {
			return x, err
		}
	} else if _, ok := obj["add_prefix_space"]; ok {
		var add bool
		if err := field(obj, "add_prefix_space", what, &add); err != nil {
			return x, err
		}
		if !add {
			x.scheme = "never"
		}
	}
	switch x.scheme {
	case "always", "first", "never":
	default:
		return x, fmt.Errorf("%s: prepend_scheme %q, want \"always\", \"first\" or \"never\"", what, x.scheme)
	}
	if err := field(obj, "split", what, &x.splitOn); err != nil {
		return x, err
	}
	return x, nil
}
