package generate

import (
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/tensor"
)

// The fake model's logits for a token t at position p are, for every v < V,
// bf16((((A·v + B·t + C·p) mod 997) / 64) − 8): integer arithmetic, then an
// exact float32 division and subtraction, then one rounding. The Python side
// of the end-to-end test computes the same values with MLX ops.
const (
	fakeV = 300
	fakeA = 37
	fakeB = 101
	fakeC = 13
)

func fakeLogits(tok, pos int) []float32 {
	row := make([]float32, fakeV)
	for v := range row {
		k := (fakeA*v + fakeB*tok + fakeC*pos) % 997
		row[v] = tensor.RoundBF16(float32(k)/64 - 8)
	}
	return row
}

// fakeCache stores the tokens seen as one int32 array [1, offset], replaced
// (and the old one released) on every update, like a KV cache's buffers.
type fakeCache struct {
	b      backend.Backend
	tokens backend.Array
	offset int
}

func (c *fakeCache) State() []backend.Array {
	if c.tokens == nil {
		return nil
	}
	return []backend.Array{c.tokens}
}

func (c *fakeCache) Offset() int { return c.offset }

// Trim moves the offset back (the positions of later tokens follow it).
func (c *fakeCache) Trim(n int) int {
	n = max(0, min(n, c.offset))
	c.offset -= n
	return n
}

// Fork is a copy holding a view of the same tokens.
func (c *fakeCache) Fork() *fakeCache {
	f := &fakeCache{b: c.b, offset: c.offset}
	if c.tokens != nil {
		f.tokens = c.b.Slice(c.tokens, []int{0, 0}, c.tokens.Shape())
	}
	return f
}

func (c *fakeCache) Release() {
	c.b.Release(c.tokens)
	c.tokens = nil
}

type fakeModel struct {
	b     backend.Backend
	calls []int // the length of every forward
	fail  bool  // return [V] logits instead of [1, V]
}

func (m *fakeModel) Backend() backend.Backend { return m.b }

func (m *fakeModel) NewCache() []*fakeCache { return []*fakeCache{{b: m.b}} }

func (m *fakeModel) Append(ids backend.Array, cache []*fakeCache) error {
	_, _, err := m.forward(ids, cache)
	return err
}

func (m *fakeModel) LastLogits(ids backend.Array, cache []*fakeCache) (backend.Array, error) {
	tok, pos, err := m.forward(ids, cache)
	if err != nil {
		return nil, err
	}
	row := fakeLogits(tok, pos)
	shape := tensor.Shape{1, 1, fakeV} // as minicpm5's Forward with one logits row
	if m.fail {
		shape = tensor.Shape{fakeV}
	}
	return m.b.FromHost(tensor.FromFloat32(shape, row).Convert(tensor.BF16)), nil
}

// forward appends ids to the cache and returns the last token and its position.
func (m *fakeModel) forward(ids backend.Array, cache []*fakeCache) (tok, pos int, err error) {
	L := ids.Shape()[1]
	m.calls = append(m.calls, L)
	c := cache[0]
	flat := m.b.AsType(m.b.Reshape(ids, 1, L), tensor.I32)
	if c.tokens == nil {
		c.tokens = flat
	} else {
		old := c.tokens
		c.tokens = m.b.Concatenate(1, old, flat)
		m.b.Release(old)
	}
	h, err := m.b.ToHost(ids)
	if err != nil {
		return 0, 0, err
	}
	pos = c.offset + L - 1
	c.offset += L
	return int(h.ToFloat64()[L-1]), pos, nil
}

func newFake(t *testing.T) *fakeModel {
	t.Helper()
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return &fakeModel{b: b}
}

func fakePrompt(n int) []int32 {
	p := make([]int32, n)
	for i := range p {
		p[i] = int32((i*53 + 7) % fakeV)
	}
	return p
}
