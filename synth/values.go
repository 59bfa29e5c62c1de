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

// groupScale draws the next group's scale: a/2^(bits-1) for the group's
// half range a, rounded to float16 and then to dt, so that the value is
// exact in float16 (a GGUF block's delta) and in dt alike.
func groupScale(r *rand.Rand, m *Module, dt tensor.DType) float32 {
	v := tensor.RoundF16(float32(groupHalfRange(r, m.Std) / float64(int(1)<<(m.Bits-1))))
	return roundTo(v, dt)
}

// groupBias is the bias of a group of scale sc: -2^(bits-1)·sc, so the codes
// 0 ... 2^bits-1 mean -2^(bits-1)·sc ... (2^(bits-1)-1)·sc, the group is
// centred on zero up to half a step, and the 4- and 8-bit forms are GGUF's
// Q4_0 and Q8_0 arithmetic exactly (x = d·(q-8), x = d·(q-128) for the
// unsigned code). Multiplying by a power of two is exact in every dtype.
func groupBias(sc float32, bits int) float32 { return -float32(int(1)<<(bits-1)) * sc }

// normValue draws an RMSNorm weight, 1 + 0.05·N(0, 1).
func normValue(r *rand.Rand) float32 { return float32(1 + 0.05*r.NormFloat64()) }

// roundTo rounds v to the nearest value of dt (BF16, F16 or F32).
func roundTo(v float32, dt tensor.DType) float32 {
	switch dt {
	case tensor.BF16:
		return tensor.RoundBF16(v)
	case tensor.F16:
		return tensor.RoundF16(v)
	}
	return v
}

// fillMLXCodes fills b (a multiple of 8 bytes) with packed codes, uniform
// random words from r; at 8 bits a zero byte becomes 1, so that the GGUF
// twin's Q8_0 code (the byte minus 128) is never -128, which llama.cpp's
// quantizer never writes.
func fillMLXCodes(b []byte, r *rand.Rand, bits int) {
	for i := 0; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	if bits == 8 {
		for i, c := range b {
			if c == 0 {
				b[i] = 1
			}
		}
	}
}

// writeMLXTensor streams t's values to w, little-endian, buf bytes at a time.
func writeMLXTensor(w io.Writer, s Spec, t Tensor, buf []byte) error {
	n := t.Bytes()
	switch t.Kind {
	case Codes:
		r := rngFor(s.Seed, t.Name)
		return chunked(w, buf, n, func(b []byte) { fillMLXCodes(b, r, t.Mod.Bits) })
	case Scales, Biases:
		r := rngFor(s.Seed, groupStream(t.Mod))
		return chunkedFloat(w, buf, n, t.DType, func() float32 {
			sc := groupScale(r, t.Mod, t.DType)
			if t.Kind == Scales {
				return sc
			}
			return groupBias(sc, t.Mod.Bits)
		})
	case Float:
		r := rngFor(s.Seed, t.Name)
		return chunkedFloat(w, buf, n, t.DType, func() float32 { return float32(t.Mod.Std * r.NormFloat64()) })
	case Norm:
		r := rngFor(s.Seed, t.Name)
		return chunkedFloat(w, buf, n, t.DType, func() float32 { return normValue(r) })
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

// chunkedFloat writes n bytes of dt values (BF16, F16 or F32) from next;
// buf's length must be a multiple of 4.
func chunkedFloat(w io.Writer, buf []byte, n int64, dt tensor.DType, next func() float32) error {
	for n > 0 {
		k := min(int64(len(buf)), n)
		b := buf[:k]
		putFloats(b, dt, next)
		if _, err := w.Write(b); err != nil {
			return err
		}
		n -= k
	}
	return nil
}

// putFloats fills b with dt values from next.
func putFloats(b []byte, dt tensor.DType, next func() float32) {
	le := binary.LittleEndian
	switch dt {
	case tensor.BF16:
		for i := 0; i < len(b); i += 2 {
			le.PutUint16(b[i:], tensor.Float32ToBF16(next()))
		}
	case tensor.F16:
		for i := 0; i < len(b); i += 2 {
			le.PutUint16(b[i:], tensor.Float32ToF16(next()))
		}
	default:
		for i := 0; i < len(b); i += 4 {
			le.PutUint32(b[i:], math.Float32bits(next()))
		}
	}
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
