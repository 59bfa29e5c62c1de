package synth

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"time"

	"github.com/mlxgo/mlxgo/tensor"
)

// rngFor returns the generator of one stream of values: seeded from the
// spec's seed and a name, so a tensor's values do not depend on which other
// tensors exist or on the order they are written in.
func rngFor(seed uint64, name string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(name))
	return rand.New(rand.NewPCG(seed, h.Sum64()))
}

// groupHalfRange draws the next group's half range a: the dequantized
// weights of the group span [-a, a], a = 2.5·std·exp(0.25·N(0, 1)) (groups
// of a trained model differ in range by a similar factor).
func groupHalfRange(r *rand.Rand, std float64) float64 {
	return 2.5 * std * math.Exp(0.25*r.NormFloat64())
}

// groupStream is the stream name of a module's per-group ranges, shared by
// its scales and biases (and the GGUF twin's block deltas).
func groupStream(m *Module) string { return m.Path + "#groups" }

// writeMLXTensor streams t's values to w, little-endian, buf bytes at a time.
func writeMLXTensor(w io.Writer, s Spec, t Tensor, buf []byte) error {
	n := t.Bytes()
	switch t.Kind {
	case Codes:
		r := rngFor(s.Seed, t.Name)
		return chunked(w, buf, n, func(b []byte) {
			for i := 0; i < len(b); i += 8 {
				binary.LittleEndian.PutUint64(b[i:], r.Uint64())
			}
		})
	case Scales, Biases:
		r := rngFor(s.Seed, groupStream(t.Mod))
		levels := float64(int(1)<<t.Mod.Bits - 1)
		return chunked16(w, buf, n, func() float32 {
			a := groupHalfRange(r, t.Mod.Std)
			if t.Kind == Scales {
				return float32(2 * a / levels)
			}
			return float32(-a)
		})
	case Float:
		r := rngFor(s.Seed, t.Name)
		return chunked16(w, buf, n, func() float32 { return float32(t.Mod.Std * r.NormFloat64()) })
	case Norm:
		r := rngFor(s.Seed, t.Name)
		return chunked16(w, buf, n, func() float32 { return float32(1 + 0.05*r.NormFloat64()) })
	}
	return fmt.Errorf("tensor %s: unknown kind %d", t.Name, t.Kind)
}

// chunked writes n bytes produced by gen into buf-sized pieces. buf's length
// must be a multiple of 8; gen fills whole 8-byte words (the last piece is
// rounded up in buf and cut on write).
func chunked(w io.Writer, buf []byte, n int64, gen func(b []byte)) error {
	for n > 0 {
		k := min(int64(len(buf)), n)
		b := buf[:(k+7)/8*8]
		gen(b)
		if _, err := w.Write(b[:k]); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// chunked16 writes n bytes of bf16 values from next.
func chunked16(w io.Writer, buf []byte, n int64, next func() float32) error {
	for n > 0 {
		k := min(int64(len(buf)), n)
		b := buf[:k]
		for i := 0; i < len(b); i += 2 {
			binary.LittleEndian.PutUint16(b[i:], tensor.Float32ToBF16(next()))
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// progress reports bytes written on a writer (stderr), at most every 5% and
// never more often than twice a second.
type progress struct {
	out          io.Writer
	what         string
	total, done  int64
	lastPct      int64
	start, shown time.Time
}

func newProgress(out io.Writer, what string, total int64) *progress {
	now := time.Now()
	return &progress{out: out, what: what, total: total, start: now, shown: now, lastPct: -1}
}

// add counts n more bytes and reports when due; name is the tensor now done.
func (p *progress) add(n int64, name string) {
	if p == nil || p.out == nil {
		return
	}
	p.done += n
	pct := p.done * 100 / max(p.total, 1)
	if pct/5 == p.lastPct/5 && p.done < p.total || time.Since(p.shown) < 500*time.Millisecond && p.done < p.total {
		return
	}
	p.lastPct, p.shown = pct, time.Now()
	fmt.Fprintf(p.out, "synth: %s %3d%% (%s of %s, %.1fs) %s\n", p.what, pct, MB(p.done), MB(p.total), time.Since(p.start).Seconds(), name)
}

// MB formats a byte count in megabytes (10^6).
func MB(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }
