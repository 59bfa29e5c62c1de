package server

import (
	"strings"

	"github.com/mlxgo/mlxgo/tokenizer"
)

// decoder turns generated tokens into text as it becomes final (the
// tokenizer's streaming detokenizer) and cuts it at the first stop string,
// which may span tokens and is never emitted: text that could be the start
// of a stop string is held back until it is not.
type decoder struct {
	st    *tokenizer.Stream
	stops []string
	held  string // final text not yet emitted: a possible start of a stop string
}

func newDecoder(tok *tokenizer.Tokenizer, stops []string) *decoder {
	return &decoder{st: tok.NewStream(false), stops: stops}
}

// push adds a token and returns the text to emit, and whether a stop
// string was found (the text then ends before it).
func (d *decoder) push(id int32) (string, bool) {
	return d.add(d.st.Push(id))
}

// flush returns the text still held (the sequence ended without a stop
// string).
func (d *decoder) flush() string {
	out, stop := d.add(d.st.Flush())
	if stop {
		return out
	}
	out += d.held
	d.held = ""
	return out
}

func (d *decoder) add(piece string) (string, bool) {
	text := d.held + piece
	if len(d.stops) == 0 {
		d.held = ""
		return text, false
	}
	cut := -1
	for _, s := range d.stops {
		if i := strings.Index(text, s); i >= 0 && (cut < 0 || i < cut) {
			cut = i
		}
	}
	if cut >= 0 {
		d.held = ""
		return text[:cut], true
	}
	keep := 0 // the longest suffix of text that starts a stop string
	for _, s := range d.stops {
		for k := min(len(s)-1, len(text)); k > keep; k-- {
			if strings.HasSuffix(text, s[:k]) {
				keep = k
				break
			}
		}
	}
	d.held = text[len(text)-keep:]
	return text[:len(text)-keep], false
}
