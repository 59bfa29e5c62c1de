package tokenizer

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"unicode/utf8"
)

// bpe is the "BPE" model of tokenizer.json.
type bpe struct {
	vocab        map[string]int32
	idToToken    []string // dense by id; "" where the vocabulary has no such id
	merges       map[[2]int32]mergeInfo
	unk          int32 // -1: none
	fuseUnk      bool
	byteFallback bool
	ignoreMerges bool
	byteIDs      [256]int32 // ids of <0xNN>, -1 where missing

	mu    sync.RWMutex
	cache map[string][]int32
}

type mergeInfo struct {
	rank int32
	id   int32
}

const bpeCacheMax = 1 << 16

func parseModel(raw json.RawMessage) (*bpe, error) {
	if isNull(raw) {
		return nil, fmt.Errorf("model: missing")
	}
	typ, obj, err := componentType(raw, "model")
	if err != nil {
		return nil, err
	}
	if typ == "" {
		if _, ok := obj["merges"]; ok {
			typ = "BPE"
		}
	}
	if typ != "BPE" {
		return nil, fmt.Errorf("model: unsupported model type %q (this package implements BPE)", typ)
	}
	var m struct {
		Vocab                   map[string]int32  `json:"vocab"`
		Merges                  []json.RawMessage `json:"merges"`
		Unk                     *string           `json:"unk_token"`
		FuseUnk                 bool              `json:"fuse_unk"`
		ByteFallback            bool              `json:"byte_fallback"`
		IgnoreMerges            bool              `json:"ignore_merges"`
		Dropout                 *float64          `json:"dropout"`
		ContinuingSubwordPrefix *string           `json:"continuing_subword_prefix"`
		EndOfWordSuffix         *string           `json:"end_of_word_suffix"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model (BPE): %w", err)
	}
	switch {
	case m.Dropout != nil && *m.Dropout != 0:
		return nil, fmt.Errorf("model (BPE): dropout %v is not supported (inference needs none)", *m.Dropout)
	case m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "":
		return nil, fmt.Errorf("model (BPE): continuing_subword_prefix %q is not supported", *m.ContinuingSubwordPrefix)
	case m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "":
		return nil, fmt.Errorf("model (BPE): end_of_word_suffix %q is not supported", *m.EndOfWordSuffix)
	}
	b := &bpe{vocab: m.Vocab, unk: -1, fuseUnk: m.FuseUnk, byteFallback: m.ByteFallback,
		ignoreMerges: m.IgnoreMerges, merges: make(map[[2]int32]mergeInfo, len(m.Merges)),
		cache: map[string][]int32{}}
	if b.vocab == nil {
		return nil, fmt.Errorf("model (BPE): missing field \"vocab\"")
	}
	maxID := int32(-1)
	for tok, id := range b.vocab {
		if id < 0 {
			return nil, fmt.Errorf("model (BPE): vocab token %q has negative id %d", tok, id)
		}
		maxID = max(maxID, id)
	}
	if int64(maxID) >= int64(len(b.vocab))+maxIDGap {
		return nil, fmt.Errorf("model (BPE): vocab id %d is far beyond the %d tokens (ids may leave at most %d unused)", maxID, len(b.vocab), maxIDGap)
	}
	b.idToToken = make([]string, maxID+1)
	for tok, id := range b.vocab {
		b.idToToken[id] = tok
	}
	if m.Unk != nil {
		id, ok := b.vocab[*m.Unk]
		if !ok {
			return nil, fmt.Errorf("model (BPE): unk_token %q is not in the vocabulary", *m.Unk)
		}
		b.unk = id
	}
	for i := range b.byteIDs {
		b.byteIDs[i] = -1
		if id, ok := b.vocab[fmt.Sprintf("<0x%02X>", i)]; ok {
			b.byteIDs[i] = id
		}
	}
	for rank, r := range m.Merges {
		a, c, err := parseMerge(r)
		if err != nil {
			return nil, fmt.Errorf("model (BPE): merges[%d]: %w", rank, err)
		}
		ia, ok1 := b.vocab[a]
		ic, ok2 := b.vocab[c]
		id, ok3 := b.vocab[a+c]
		switch {
		case !ok1:
			return nil, fmt.Errorf("model (BPE): merges[%d] (%q %q): token %q is not in the vocabulary", rank, a, c, a)
		case !ok2:
			return nil, fmt.Errorf("model (BPE): merges[%d] (%q %q): token %q is not in the vocabulary", rank, a, c, c)
		case !ok3:
			return nil, fmt.Errorf("model (BPE): merges[%d] (%q %q): merged token %q is not in the vocabulary", rank, a, c, a+c)
		}
		key := [2]int32{ia, ic}
		if _, dup := b.merges[key]; !dup { // the first (lowest) rank wins, as in tokenizers
			b.merges[key] = mergeInfo{rank: int32(rank), id: id}
		}
	}
	return b, nil
}

// parseMerge reads one merge: "a b" (older files) or ["a", "b"].
func parseMerge(r json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(r, &s); err == nil {
		parts := strings.Split(s, " ")
		if len(parts) != 2 {
			return "", "", fmt.Errorf("%q: want two tokens separated by one space", s)
		}
		return parts[0], parts[1], nil
	}
	var p []string
	if err := json.Unmarshal(r, &p); err != nil || len(p) != 2 {
		return "", "", fmt.Errorf("%.60s: want \"a b\" or [\"a\", \"b\"]", r)
	}
	return p[0], p[1], nil
}

// tokenizePiece appends the ids of one pre-tokenized word. The cache is keyed by the piece's
// string as it stands (raw or mapped); one tokenizer always produces the same kind.
func (b *bpe) tokenizePiece(dst []int32, p piece) []int32 {
	if p.s == "" {
		return dst
	}
	b.mu.RLock()
	ids, ok := b.cache[p.s]
	b.mu.RUnlock()
	if ok {
		return append(dst, ids...)
	}
	word := p.text()
	if id, ok := b.vocab[word]; ok && b.ignoreMerges {
		ids = []int32{id}
	} else {
		ids = b.merge(b.symbols(word))
	}
	if len(p.s) < 256 {
		b.mu.Lock()
		if len(b.cache) >= bpeCacheMax {
			clear(b.cache)
		}
		b.cache[p.s] = ids
		b.mu.Unlock()
	}
	return append(dst, ids...)
}

// symbol is one node of the doubly linked list a word is merged in.
type symbol struct {
	id         int32
	prev, next int32 // -1 at the ends
	gone       bool
}

// symbols splits a word into its characters' ids, with byte fallback and unk as tokenizers does.
func (b *bpe) symbols(word string) []symbol {
	syms := make([]symbol, 0, len(word))
	unkOpen := false
	push := func(id int32) {
		syms = append(syms, symbol{id: id})
	}
	for i := 0; i < len(word); {
		_, n := utf8.DecodeRuneInString(word[i:])
		ch := word[i : i+n]
		i += n
		if id, ok := b.vocab[ch]; ok {
			push(id)
			unkOpen = false
			continue
		}
		if b.byteFallback {
			ok := true
			for j := 0; j < len(ch); j++ {
				if b.byteIDs[ch[j]] < 0 {
					ok = false
				}
			}
			if ok {
				for j := 0; j < len(ch); j++ {
					push(b.byteIDs[ch[j]])
				}
				unkOpen = false
				continue
			}
		}
		if b.unk < 0 {
			continue // no unk token: the character is dropped, as tokenizers does
		}
		if b.fuseUnk && unkOpen {
			continue
		}
		push(b.unk)
		unkOpen = true
	}
	for i := range syms {
		syms[i].prev = int32(i - 1)
		syms[i].next = int32(i + 1)
	}
	if len(syms) > 0 {
		syms[len(syms)-1].next = -1
	}
	return syms
}

type mergeCand struct {
	pos  int32
	rank int32
	id   int32
}

type mergeQueue []mergeCand

func (q mergeQueue) Len() int { return len(q) }
func (q mergeQueue) Less(i, j int) bool {
	if q[i].rank != q[j].rank {
		return q[i].rank < q[j].rank
	}
	return q[i].pos < q[j].pos
}
func (q mergeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *mergeQueue) Push(x any)   { *q = append(*q, x.(mergeCand)) }
func (q *mergeQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// merge applies merges lowest rank first, leftmost first among equal ranks, and returns the ids.
func (b *bpe) merge(syms []symbol) []int32 {
	if len(syms) > 1 {
		q := make(mergeQueue, 0, len(syms))
		for i := 0; i+1 < len(syms); i++ {
			if m, ok := b.merges[[2]int32{syms[i].id, syms[i+1].id}]; ok {
				q = append(q, mergeCand{pos: int32(i), rank: m.rank, id: m.id})
			}
		}
		heap.Init(&q)
		for q.Len() > 0 {
			c := heap.Pop(&q).(mergeCand)
			s := &syms[c.pos]
			if s.gone || s.next < 0 {
				continue
			}
			right := &syms[s.next]
			if m, ok := b.merges[[2]int32{s.id, right.id}]; !ok || m.id != c.id {
				continue // stale: one side merged since this candidate was queued
			}
			s.id = c.id
			right.gone = true
			s.next = right.next
			if s.next >= 0 {
				syms[s.next].prev = c.pos
			}
			if s.prev >= 0 {
				if m, ok := b.merges[[2]int32{syms[s.prev].id, s.id}]; ok {
					heap.Push(&q, mergeCand{pos: s.prev, rank: m.rank, id: m.id})
				}
			}
			if s.next >= 0 {
				if m, ok := b.merges[[2]int32{s.id, syms[s.next].id}]; ok {
					heap.Push(&q, mergeCand{pos: c.pos, rank: m.rank, id: m.id})
				}
			}
		}
	}
	out := make([]int32, 0, len(syms))
	for i := range syms {
		if !syms[i].gone {
			out = append(out, syms[i].id)
		}
	}
	return out
}
