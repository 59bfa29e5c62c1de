package tokenizer

import (
	"sort"
	"unicode"
	"unicode/utf8"
)

// addedToken is one entry of tokenizer.json's added_tokens.
type addedToken struct {
	id         int32
	content    string
	singleWord bool
	lstrip     bool
	rstrip     bool
	normalized bool
	special    bool
}

// addedMatcher finds added tokens in text, leftmost-longest, as tokenizers' AddedVocabulary
// does with its Aho-Corasick automaton.
type addedMatcher struct {
	byFirst [256][]*addedToken // candidates by first byte, longest first
}

func newAddedMatcher(tokens []*addedToken) *addedMatcher {
	if len(tokens) == 0 {
		return nil
	}
	m := &addedMatcher{}
	for _, t := range tokens {
		m.byFirst[t.content[0]] = append(m.byFirst[t.content[0]], t)
	}
	for _, list := range &m.byFirst {
		sort.SliceStable(list, func(i, j int) bool { return len(list[i].content) > len(list[j].content) })
	}
	return m
}

// segment is a piece of text, either an added token (id >= 0) or text to tokenize (id -1).
type segment struct {
	text  string
	id    int32
	first bool // starts at offset 0 of the original text
}

// isWordChar is \w of Rust's regex crate, which tokenizers uses for single_word:
// Alphabetic, marks, decimal digits, connector punctuation and Join_Control.
func isWordChar(r rune) bool {
	return unicode.IsLetter(r) || unicode.IsMark(r) || unicode.Is(unicode.Nd, r) || unicode.Is(unicode.Pc, r) ||
		unicode.Is(unicode.Nl, r) || unicode.Is(unicode.Other_Alphabetic, r) || unicode.Is(unicode.Join_Control, r)
}

// split cuts s into added tokens and the text between them, applying single_word, lstrip and
// rstrip as tokenizers' AddedVocabulary::find_matches does.
func (m *addedMatcher) split(dst []segment, s string, first bool) []segment {
	if m == nil || s == "" {
		return append(dst, segment{text: s, id: -1, first: first})
	}
	startOffset := 0
	for i := 0; i < len(s); {
		var tok *addedToken
		for _, t := range m.byFirst[s[i]] {
			if len(s)-i >= len(t.content) && s[i:i+len(t.content)] == t.content {
				tok = t
				break
			}
		}
		if tok == nil {
			i++
			continue
		}
		start, stop := i, i+len(tok.content)
		i = stop // the automaton resumes after the match, whatever stripping does
		if start < startOffset {
			continue
		}
		if tok.singleWord {
			before, _ := utf8.DecodeLastRuneInString(s[:start])
			after, _ := utf8.DecodeRuneInString(s[stop:])
			if start > 0 && isWordChar(before) || stop < len(s) && isWordChar(after) {
				continue
			}
		}
		if tok.lstrip {
			j := start
			for j > startOffset {
				r, w := utf8.DecodeLastRuneInString(s[:j])
				if !unicode.IsSpace(r) {
					break
				}
				j -= w
			}
			start = j
		}
		if tok.rstrip {
			for stop < len(s) {
				r, w := utf8.DecodeRuneInString(s[stop:])
				if !unicode.IsSpace(r) {
					break
				}
				stop += w
			}
			i = max(i, stop)
		}
		if startOffset < start {
			dst = append(dst, segment{text: s[startOffset:start], id: -1, first: first && startOffset == 0})
		}
		dst = append(dst, segment{text: s[start:stop], id: tok.id})
		startOffset = stop
	}
	if startOffset < len(s) {
		dst = append(dst, segment{text: s[startOffset:], id: -1, first: first && startOffset == 0})
	}
	return dst
}
