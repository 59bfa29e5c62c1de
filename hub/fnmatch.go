package hub

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Pattern is a compiled allow pattern with the meaning huggingface_hub's
// filter_repo_objects gives it: Python's fnmatch.fnmatchcase on the file's
// path in the repo, so '*' matches any run of characters, '/' included;
// '?' matches one character; "[seq]" and "[!seq]" match one character in or
// not in seq, with ranges such as "a-z" (a reversed range such as "z-a"
// matches nothing, as in Python); a '[' without a closing ']' is literal; and
// a pattern ending in '/' gets a '*' appended, so "dir/" takes the whole
// folder. Matching is case-sensitive.
type Pattern struct {
	src   string
	items []patItem
}

type patKind uint8

const (
	patLit  patKind = iota // one rune, r
	patAny                 // '?'
	patStar                // '*'
	patSet                 // a bracket expression
)

type patItem struct {
	kind   patKind
	r      rune
	neg    bool
	ranges [][2]rune // inclusive; single runes are [r, r]
}

// CompilePattern compiles one fnmatch-style pattern. It fails only on an
// empty pattern or one that is not UTF-8.
func CompilePattern(p string) (Pattern, error) {
	if p == "" {
		return Pattern{}, fmt.Errorf("empty pattern")
	}
	if !utf8.ValidString(p) {
		return Pattern{}, fmt.Errorf("pattern %q is not UTF-8", p)
	}
	src := p
	if strings.HasSuffix(p, "/") {
		p += "*"
	}
	rs := []rune(p)
	var items []patItem
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			if n := len(items); n == 0 || items[n-1].kind != patStar {
				items = append(items, patItem{kind: patStar})
			}
		case '?':
			items = append(items, patItem{kind: patAny})
		case '[':
			// As Python's fnmatch.translate: a '!' after '[' negates, and a ']'
			// right after "[" or "[!" belongs to the set.
			j := i + 1
			if j < len(rs) && rs[j] == '!' {
				j++
			}
			if j < len(rs) && rs[j] == ']' {
				j++
			}
			for j < len(rs) && rs[j] != ']' {
				j++
			}
			if j >= len(rs) {
				items = append(items, patItem{kind: patLit, r: '['})
				continue
			}
			items = append(items, parseSet(rs[i+1:j]))
			i = j
		default:
			items = append(items, patItem{kind: patLit, r: c})
		}
	}
	return Pattern{src: src, items: items}, nil
}

// parseSet reads the inside of a bracket expression: an optional leading
// '!', then runes and lo-hi ranges; a '-' first or last is literal.
func parseSet(s []rune) patItem {
	it := patItem{kind: patSet}
	if len(s) > 0 && s[0] == '!' {
		it.neg = true
		s = s[1:]
	}
	for i := 0; i < len(s); i++ {
		if i+2 < len(s) && s[i+1] == '-' {
			if s[i] <= s[i+2] {
				it.ranges = append(it.ranges, [2]rune{s[i], s[i+2]})
			}
			i += 2
			continue
		}
		it.ranges = append(it.ranges, [2]rune{s[i], s[i]})
	}
	return it
}

// String returns the pattern as given.
func (p Pattern) String() string { return p.src }

// Match reports whether name matches the whole pattern. It runs in
// O(len(pattern) * len(name)): one '*' is backtracked at a time, which is
// exact because '*' matches any character.
func (p Pattern) Match(name string) bool {
	rs := []rune(name)
	pi, ni := 0, 0
	star, starN := -1, 0
	for ni < len(rs) {
		if pi < len(p.items) {
			it := p.items[pi]
			if it.kind == patStar {
				star, starN = pi, ni
				pi++
				continue
			}
			if it.one(rs[ni]) {
				pi++
				ni++
				continue
			}
		}
		if star < 0 {
			return false
		}
		starN++
		pi, ni = star+1, starN
	}
	for pi < len(p.items) && p.items[pi].kind == patStar {
		pi++
	}
	return pi == len(p.items)
}

// one reports whether a non-star item matches the rune c.
func (it patItem) one(c rune) bool {
	switch it.kind {
	case patLit:
		return c == it.r
	case patAny:
		return true
	case patSet:
		if len(it.ranges) == 0 {
			// Every range was reversed: Python makes "[z-a]" match nothing
			// and "[!z-a]" any character.
			return it.neg
		}
		in := false
		for _, r := range it.ranges {
			if r[0] <= c && c <= r[1] {
				in = true
				break
			}
		}
		return in != it.neg
	}
	return false
}

// CompilePatterns compiles a list of patterns, naming the bad one.
func CompilePatterns(ps []string) ([]Pattern, error) {
	out := make([]Pattern, 0, len(ps))
	for _, s := range ps {
		p, err := CompilePattern(s)
		if err != nil {
			return nil, fmt.Errorf("allow pattern %q: %w", s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// MatchAny reports whether name matches at least one of ps.
func MatchAny(ps []Pattern, name string) bool {
	for _, p := range ps {
		if p.Match(name) {
			return true
		}
	}
	return false
}
