package tokenizer

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Scanners for the split patterns with lookahead, which Go's regexp cannot run. Each follows
// the Oniguruma semantics the tokenizers library uses: leftmost-first alternation, greedy
// quantifiers with backtracking. \s is Unicode White_Space (unicode.IsSpace), \p{L} and \p{N}
// are unicode.IsLetter and unicode.IsNumber. Every character is covered by some alternative,
// so the matches tile the input.

func isOther(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }

func runeAt(s string, i int) (rune, int) {
	if i >= len(s) {
		return -1, 0
	}
	if c := s[i]; c < utf8.RuneSelf {
		return rune(c), 1
	}
	return utf8.DecodeRuneInString(s[i:])
}

// span of runes satisfying f from i, at most maxN runes (maxN < 0: unbounded).
func runWhile(s string, i int, f func(rune) bool, maxN int) int {
	for n := 0; i < len(s) && n != maxN; n++ {
		r, w := runeAt(s, i)
		if !f(r) {
			break
		}
		i += w
	}
	return i
}

// contraction matches 's 't 're 've 'm 'll 'd at i (s[i] == '\”); fold makes it case-insensitive.
func contraction(s string, i int, fold bool) int {
	rest := s[i+1:]
	lower := func(k int) string {
		if len(rest) < k {
			return ""
		}
		if fold {
			return strings.ToLower(rest[:k])
		}
		return rest[:k]
	}
	switch lower(1) {
	case "s", "t", "m", "d":
		return i + 2
	}
	switch lower(2) {
	case "re", "ve", "ll":
		return i + 3
	}
	if fold && strings.HasPrefix(rest, "\u017f") { // ſ folds to s under (?i)
		return i + 1 + len("\u017f")
	}
	return -1
}

// trailingSpace implements `\s+(?!\S)|\s+` at i, where s[i] is white space: the whole run when
// it ends the text or is one character long, else the run without its last character.
func trailingSpace(s string, i int) int {
	end := runWhile(s, i, unicode.IsSpace, -1)
	if end == len(s) {
		return end
	}
	_, w := utf8.DecodeLastRuneInString(s[:end])
	if end-w > i {
		return end - w
	}
	return end
}

// gpt2Split finds the matches of
// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
func gpt2Split(s string) [][2]int {
	out := make([][2]int, 0, len(s)/4+1)
	for i := 0; i < len(s); {
		end := gpt2Next(s, i)
		out = append(out, [2]int{i, end})
		i = end
	}
	return out
}

func gpt2Next(s string, i int) int {
	r, w := runeAt(s, i)
	if r == '\'' {
		if e := contraction(s, i, false); e > 0 {
			return e
		}
	}
	j := i
	if r == ' ' {
		j = i + w
	}
	if rj, _ := runeAt(s, j); rj >= 0 {
		switch {
		case unicode.IsLetter(rj):
			return runWhile(s, j, unicode.IsLetter, -1)
		case unicode.IsNumber(rj):
			return runWhile(s, j, unicode.IsNumber, -1)
		case isOther(rj):
			return runWhile(s, j, isOther, -1)
		}
	}
	return trailingSpace(s, i)
}

// llama3Split finds the matches of the Llama-3 pattern (maxDigits 3)
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// or of the Qwen2 pattern, which has \p{N} for \p{N}{1,3} (maxDigits 1).
func llama3Split(s string, maxDigits int) [][2]int {
	out := make([][2]int, 0, len(s)/4+1)
	for i := 0; i < len(s); {
		end := llama3Next(s, i, maxDigits)
		out = append(out, [2]int{i, end})
		i = end
	}
	return out
}

func isNewline(r rune) bool { return r == '\r' || r == '\n' }

func llama3Next(s string, i, maxDigits int) int {
	r, w := runeAt(s, i)
	if r == '\'' {
		if e := contraction(s, i, true); e > 0 {
			return e
		}
	}
	// [^\r\n\p{L}\p{N}]?\p{L}+
	if unicode.IsLetter(r) {
		return runWhile(s, i, unicode.IsLetter, -1)
	}
	if !isNewline(r) && !unicode.IsNumber(r) {
		if r2, _ := runeAt(s, i+w); r2 >= 0 && unicode.IsLetter(r2) {
			return runWhile(s, i+w, unicode.IsLetter, -1)
		}
	}
	// \p{N}{1,3}
	if unicode.IsNumber(r) {
		return runWhile(s, i, unicode.IsNumber, maxDigits)
	}
	//  ?[^\s\p{L}\p{N}]+[\r\n]*
	j := i
	if r == ' ' {
		j = i + w
	}
	if rj, _ := runeAt(s, j); rj >= 0 && isOther(rj) {
		e := runWhile(s, j, isOther, -1)
		return runWhile(s, e, isNewline, -1)
	}
	// \s*[\r\n]+ : the white-space run up to and including its last newline
	end := runWhile(s, i, unicode.IsSpace, -1)
	if k := strings.LastIndexAny(s[i:end], "\r\n"); k >= 0 {
		return i + k + 1
	}
	return trailingSpace(s, i)
}

// byteToRune is GPT-2's byte-to-unicode table: printable Latin-1 bytes map to themselves, the
// others to U+0100 upwards in byte order.
var byteToRune, runeToByte = func() ([256]rune, map[rune]byte) {
	var b2r [256]rune
	r2b := map[rune]byte{}
	n := 0
	for b := 0; b < 256; b++ {
		if b >= '!' && b <= '~' || b >= 0xA1 && b <= 0xAC || b >= 0xAE && b <= 0xFF {
			b2r[b] = rune(b)
		} else {
			b2r[b] = rune(256 + n)
			n++
		}
		r2b[b2r[b]] = byte(b)
	}
	return b2r, r2b
}()

var byteToString = func() (t [256]string) {
	for b := range t {
		t[b] = string(byteToRune[b])
	}
	return t
}()

func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(len(s) * 2)
	for i := 0; i < len(s); i++ {
		sb.WriteString(byteToString[s[i]])
	}
	return sb.String()
}
