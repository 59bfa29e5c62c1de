package server

import (
	"slices"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/generate"
	"github.com/mlxgo/mlxgo/nn"
)

// prefixCache keeps the caches of finished sequences, keyed by the tokens
// they hold, so that a new request whose prompt shares a prefix with one of
// them prefills only the rest (mlx_lm.server's LRUPromptCache). It holds
// at most limit bytes of keys and values; the least recently used entries
// go first. It lives on the engine's goroutine: not safe for concurrent use.
type prefixCache struct {
	b       backend.Backend
	limit   int64
	bytes   int64
	entries []*prefixEntry // least recently used first
	dir     *cacheDir      // where entries are saved; nil: nowhere
}

type prefixEntry struct {
	tokens []int32
	cache  []nn.KVCache // one compact *nn.FullKVCache per layer
	bytes  int64
	saved  bool // a file of the directory holds it
}

func newPrefixCache(b backend.Backend, limit int64) *prefixCache {
	return &prefixCache{b: b, limit: limit}
}

// lookup returns the entry sharing the longest prefix with prompt and how
// many of its tokens to reuse (at most len(prompt)-1, so that one token is
// left to run), or nil when none shares a token. The entry becomes the
// most recently used.
func (p *prefixCache) lookup(prompt []int32) (*prefixEntry, int) {
	best, n := -1, 0
	for i, e := range p.entries {
		if k := min(generate.CommonPrefix(e.tokens, prompt), len(prompt)-1); k > n {
			best, n = i, k
		}
	}
	if best < 0 {
		return nil, 0
	}
	e := p.entries[best]
	p.entries = append(slices.Delete(p.entries, best, best+1), e)
	return e, n
}

// add stores a compact copy of cache (a finished sequence's, per layer)
// for tokens, and releases cache (see insert).
func (p *prefixCache) add(tokens []int32, cache []nn.KVCache) {
	var e *prefixEntry
	_ = p.b.Do(func() (err error) {
		defer backend.Recover(&err)
		defer func() {
			for _, c := range cache {
				c.Release()
			}
		}()
		sc := p.b.Scope()
		defer sc.Close()
		out := make([]nn.KVCache, len(cache))
		for l, c := range cache {
			st := c.State()
			if len(st) != 2 {
				return nil
			}
			// Exact-size copies: the batch's buffers are not pinned, and
			// no slot is held beyond the tokens.
			n := c.Offset()
			cp := func(a backend.Array) backend.Array {
				s := a.Shape()
				v := p.b.Slice(a, []int{0, 0, 0, 0}, []int{s[0], s[1], n, s[3]})
				return p.b.SliceUpdate(p.b.Zeros(v.Shape(), v.DType()), v, []int{0, 0, 0, 0})
			}
			fc, err := nn.RestoreFullKVCache(p.b, cp(st[0]), cp(st[1]), n)
			if err != nil {
				for _, d := range out[:l] {
					d.Release()
				}
				return err
			}
			sc.Keep(fc.State()...)
			out[l] = fc
		}
		e = newEntry(tokens, out)
		return nil
	})
	if e != nil {
		p.insert(e)
	}
}

func newEntry(tokens []int32, cache []nn.KVCache) *prefixEntry {
	e := &prefixEntry{tokens: slices.Clone(tokens), cache: cache}
	for _, c := range cache {
		for _, a := range c.State() {
			e.bytes += int64(a.Shape().Size() * a.DType().Size())
		}
	}
	return e
}

// insert makes e the most recently used entry. Entries whose tokens are a
// prefix of e's are dropped (e serves them; their files too), then the
// least recently used are evicted (saved to the directory first, when
// there is one) until the total fits the limit; an entry larger than the
// limit is not kept.
func (p *prefixCache) insert(e *prefixEntry) {
	if e.bytes > p.limit {
		p.free(e)
		return
	}
	p.entries = slices.DeleteFunc(p.entries, func(o *prefixEntry) bool {
		if len(o.tokens) <= len(e.tokens) && slices.Equal(o.tokens, e.tokens[:len(o.tokens)]) {
			p.bytes -= o.bytes
			if slices.Equal(o.tokens, e.tokens) {
				e.saved = e.saved || o.saved // the same file holds both
			} else if p.dir != nil && o.saved {
				p.dir.remove(o.tokens)
			}
			p.free(o)
			return true
		}
		return false
	})
	p.entries = append(p.entries, e)
	p.bytes += e.bytes
	for p.bytes > p.limit && len(p.entries) > 0 {
		o := p.entries[0]
		p.bytes -= o.bytes
		if p.dir != nil && !o.saved {
			p.dir.save(o)
		}
		p.free(o)
		p.entries = p.entries[1:]
	}
}

// free releases e's caches.
func (p *prefixCache) free(e *prefixEntry) {
	_ = p.b.Do(func() (err error) {
		defer backend.Recover(&err)
		for _, c := range e.cache {
			c.Release()
		}
		return nil
	})
}

// clear frees every entry, saving each to the directory first (when
// there is one).
func (p *prefixCache) clear() {
	for _, e := range p.entries {
		if p.dir != nil {
			p.dir.save(e)
		}
		p.free(e)
	}
	p.entries, p.bytes = nil, 0
}

// arrays counts the backend arrays the entries hold.
func (p *prefixCache) arrays() int {
	n := 0
	for _, e := range p.entries {
		for _, c := range e.cache {
			n += len(c.State())
		}
	}
	return n
}
