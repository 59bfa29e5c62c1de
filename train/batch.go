package train

import (
	"fmt"
	"io"
	"sort"
)

// Batch is one batch of iterate_batches: Tokens is [B, L] row-major,
// zero-padded, and Lengths holds each row's (offset, length): the loss
// counts target positions offset..length (1-based, default_loss).
type Batch struct {
	Tokens  []int32
	B, L    int
	Lengths [][2]int32
}

// Batches is mlx_lm's iterate_batches over one dataset.
type Batches struct {
	set       []Example
	batches   [][]int
	maxSeq    int
	loop      bool
	rng       *NumpyRNG
	warn      io.Writer
	order     []int
	pos       int
	started   bool
	batchSize int
}

// NewBatches prepares iterate_batches(set, batchSize, maxSeq, loop): the
// examples sorted (stably) by their number of JSON fields, as mlx_lm's
// CacheDataset.itemlen sorts them, cut into consecutive batches of
// batchSize (a remainder is dropped); each epoch visits them in the
// order of rng.Permutation, drawn when the epoch starts. Sequences
// longer than maxSeq are truncated with mlx_lm's warning (naming the
// longest one's file and line) on warn.
func NewBatches(set []Example, batchSize, maxSeq int, loop bool, rng *NumpyRNG, warn io.Writer) (*Batches, error) {
	if batchSize <= 0 || maxSeq <= 0 {
		return nil, fmt.Errorf("train: batch size %d and max sequence length %d must be positive", batchSize, maxSeq)
	}
	if len(set) < batchSize {
		return nil, fmt.Errorf("train: dataset must have at least batch_size=%d examples but only has %d", batchSize, len(set))
	}
	idx := make([]int, len(set))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return set[idx[a]].Fields < set[idx[b]].Fields })
	var batches [][]int
	for i := 0; i+batchSize <= len(idx); i += batchSize {
		batches = append(batches, idx[i:i+batchSize])
	}
	return &Batches{set: set, batches: batches, maxSeq: maxSeq, loop: loop, rng: rng, warn: warn, batchSize: batchSize}, nil
}

// Len is the number of batches in one epoch.
func (it *Batches) Len() int { return len(it.batches) }

// Next returns the next batch; false when a non-looping iterator is done.
func (it *Batches) Next() (Batch, bool) {
	if it.order == nil || it.pos == len(it.order) {
		if it.started && !it.loop {
			return Batch{}, false
		}
		it.order, it.pos, it.started = it.rng.Permutation(len(it.batches)), 0, true
	}
	rows := it.batches[it.order[it.pos]]
	it.pos++
	longest := 0
	for k, j := range rows {
		if len(it.set[j].Tokens) > len(it.set[rows[longest]].Tokens) {
			longest = k
		}
	}
	maxLen := len(it.set[rows[longest]].Tokens)
	if maxLen > it.maxSeq && it.warn != nil {
		fmt.Fprintf(it.warn, "[WARNING] Some sequences are longer than %d tokens. The longest sentence %d will be truncated to %d. Consider pre-splitting your data to save memory. (%s)\n", it.maxSeq, maxLen, it.maxSeq, it.set[rows[longest]].Source)
	}
	const padTo = 32
	L := min(1+padTo*((maxLen+padTo-1)/padTo), it.maxSeq)
	b := Batch{Tokens: make([]int32, len(rows)*L), B: len(rows), L: L, Lengths: make([][2]int32, len(rows))}
	for k, j := range rows {
		ex := it.set[j]
		n := min(len(ex.Tokens), it.maxSeq)
		copy(b.Tokens[k*L:], ex.Tokens[:n])
		b.Lengths[k] = [2]int32{int32(ex.Offset), int32(n)}
	}
	return b, true
}
