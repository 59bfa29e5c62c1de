package tokenizer

import "strings"

// Stream decodes token ids one at a time. The text it returns, concatenated, equals
// Decode of all ids pushed so far once Flush has been called; before that it holds back
// text that is not final: an incomplete UTF-8 character, or a token whose leading space
// depends on what precedes it.
//
// With a ByteFallback decoder, a run of <0xNN> tokens decodes to its text only if the whole
// run is valid UTF-8 (else to one U+FFFD per byte), so text is held back while the last
// token is a byte token.
//
// It decodes a window of the last tokens: the tokens already emitted in the previous step
// (context, so that a decoder stripping the first token's space strips it there too) and
// the new ones, and emits what the new ones add. A Stream is not safe for concurrent use.
type Stream struct {
	t           *Tokenizer
	skipSpecial bool
	tokens      []int32
	prefix      int // start of the context window
	read        int // tokens before this are emitted
}

// NewStream returns a streaming decoder; skipSpecial drops special tokens as DecodeSkipSpecial does.
func (t *Tokenizer) NewStream(skipSpecial bool) *Stream {
	return &Stream{t: t, skipSpecial: skipSpecial}
}

// Push adds one id and returns the text that became final ("" when it is held back).
func (s *Stream) Push(id int32) string {
	s.tokens = append(s.tokens, id)
	return s.emit(false)
}

// Flush returns the text still held back, including an incomplete character as U+FFFD.
// Pushing may continue afterwards.
func (s *Stream) Flush() string { return s.emit(true) }

// Tokens returns every id pushed so far.
func (s *Stream) Tokens() []int32 { return s.tokens }

func (s *Stream) emit(force bool) string {
	if s.read == len(s.tokens) {
		return ""
	}
	before := s.t.decode(s.tokens[s.prefix:s.read], s.skipSpecial)
	now := s.t.decode(s.tokens[s.prefix:], s.skipSpecial)
	if !strings.HasPrefix(now, before) {
		return ""
	}
	if !force && (len(now) == len(before) || strings.HasSuffix(now, "\uFFFD") || s.inByteRun()) {
		return ""
	}
	s.prefix, s.read = s.read, len(s.tokens)
	return now[len(before):]
}

// inByteRun reports whether the decoder has ByteFallback and the last token that decoding
// keeps is a <0xNN> token.
func (s *Stream) inByteRun() bool {
	if !s.t.byteFallbackDecode {
		return false
	}
	for i := len(s.tokens) - 1; i >= s.prefix; i-- {
		id := s.tokens[i]
		tok, ok := s.t.IDToToken(id)
		if !ok || s.skipSpecial && s.t.IsSpecial(id) {
			continue
		}
		_, isByte := byteToken(tok)
		return isByte
	}
	return false
}
