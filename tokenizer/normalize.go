package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// normalizer is one "normalizer" component of tokenizer.json.
type normalizer interface {
	normalize(s string) string
}

type seqNormalizer []normalizer

func (n seqNormalizer) normalize(s string) string {
	for _, x := range n {
		s = x.normalize(s)
	}
	return s
}

type formNormalizer norm.Form

func (n formNormalizer) normalize(s string) string { return norm.Form(n).String(s) }

type lowercase struct{}

func (lowercase) normalize(s string) string { return strings.ToLower(s) }

// prepend adds its text in front of every non-empty piece.
type prepend string

func (p prepend) normalize(s string) string {
	if s == "" {
		return s
	}
	return string(p) + s
}

type stripNormalizer struct{ left, right bool }

func (n stripNormalizer) normalize(s string) string {
	if n.left {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
	}
	if n.right {
		s = strings.TrimRightFunc(s, unicode.IsSpace)
	}
	return s
}

// replace replaces every match of a literal string or a regular expression.
type replace struct {
	literal string
	re      *regexp.Regexp
	content string
}

func (r replace) normalize(s string) string {
	if r.re != nil {
		return r.re.ReplaceAllLiteralString(s, r.content)
	}
	if r.literal == "" {
		return s
	}
	return strings.ReplaceAll(s, r.literal, r.content)
}

// parsePattern reads a Replace/Split "pattern": {"String": s} or {"Regex": re}.
func parsePattern(obj map[string]json.RawMessage, what string) (literal string, regex string, isRegex bool, err error) {
	var p struct {
		String *string `json:"String"`
		Regex  *string `json:"Regex"`
	}
	if err := field(obj, "pattern", what, &p); err != nil {
		return "", "", false, err
	}
	switch {
	case p.String != nil:
		return *p.String, "", false, nil
	case p.Regex != nil:
		return "", *p.Regex, true, nil
	}
	return "", "", false, fmt.Errorf("%s: field \"pattern\": want {\"String\": ...} or {\"Regex\": ...}", what)
}

func parseReplace(obj map[string]json.RawMessage, what string) (replace, error) {
	lit, re, isRe, err := parsePattern(obj, what)
	if err != nil {
		return replace{}, err
	}
	r := replace{literal: lit}
	if err := field(obj, "content", what, &r.content); err != nil {
		return replace{}, err
	}
	if isRe {
		if r.re, err = regexp.Compile(re); err != nil {
			return replace{}, fmt.Errorf("%s: regex %q is not supported by this package: %w", what, re, err)
		}
	}
	return r, nil
}

func parseNormalizer(raw json.RawMessage) (normalizer, error) {
	if isNull(raw) {
		return nil, nil
	}
	typ, obj, err := componentType(raw, "normalizer")
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("normalizer %q", typ)
	switch typ {
	case "Sequence":
		seq, err := parseSequence(obj, "normalizers", what, parseNormalizer)
		return seqNormalizer(seq), err
	case "NFC":
		return formNormalizer(norm.NFC), nil
	case "NFD":
		return formNormalizer(norm.NFD), nil
	case "NFKC":
		return formNormalizer(norm.NFKC), nil
	case "NFKD":
		return formNormalizer(norm.NFKD), nil
	case "Lowercase":
		return lowercase{}, nil
	case "Prepend":
		var p string
		if err := field(obj, "prepend", what, &p); err != nil {
			return nil, err
		}
		return prepend(p), nil
	case "Strip":
		var s struct {
			Left  bool `json:"strip_left"`
			Right bool `json:"strip_right"`
		}
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return stripNormalizer{s.Left, s.Right}, nil
	case "Replace":
		return parseReplace(obj, what)
	}
	return nil, fmt.Errorf("unsupported normalizer type %q", typ)
}
