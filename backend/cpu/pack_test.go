package cpu

import (
	"bytes"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu/internal/kernel"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestPackWeights: a "fast" backend with PackWeights gives the bytes of one
// without it for quantized weights borrowed from host memory (as a
// checkpoint's mapping is), on the call that packs them and the next; the
// packed copy counts in Stats.PackedBytes (not LiveBytes) until the weight
// is released; weights copied into the backend pack nothing. Rows of
// 4-bit groups of 32 keep the one-row bits at every number of rows; other
// shapes, through the panels, the int8 GEMM's bits at every number of rows
// (gemmRows).
func TestPackWeights(t *testing.T) {
	if !PackWeightsSupported() {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI, so PackWeights does nothing here")
	}
	for _, c := range []struct {
		name        string
		n, k, gs, b int
	}{{"4-bit g32 (one-row order)", 40, 576, 32, 4}, {"4-bit g64", 48, 512, 64, 4}, {"8-bit g32", 37, 256, 32, 8}} {
		t.Run(c.name, func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(c.n), 7))
			wv := make([]float64, c.n*c.k)
			for i := range wv {
				wv[i] = r.NormFloat64()
			}
			plain := openWith(t, backend.Options{Precision: "fast", NoPackWeights: true})
			q := plain.Quantize(arr(plain, tensor.BF16, tensor.Shape{c.n, c.k}, wv...), c.gs, c.b)
			wd, sd, bd := quantHost(t, plain, q)
			packing := openWith(t, backend.Options{Precision: "fast", PackWeights: true})
			borrowed := backend.QuantizedArray{W: packing.Borrow(wd), Scales: packing.Borrow(sd), Biases: packing.Borrow(bd), GroupSize: c.gs, Bits: c.b}
			copied := backend.QuantizedArray{W: packing.FromHost(wd), Scales: packing.FromHost(sd), Biases: packing.FromHost(bd), GroupSize: c.gs, Bits: c.b}
			for _, m := range []int{2, 8, 9} {
				xv := make([]float64, m*c.k)
				for i := range xv {
					xv[i] = r.NormFloat64()
				}
				want := gemmRows(t, plain, q, xv, m, c.k)
				for call := range 2 {
					got, err := packing.ToHost(packing.QuantizedMatmul(arr(packing, tensor.BF16, tensor.Shape{m, c.k}, xv...), borrowed, true))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Data, want.Data) {
						t.Fatalf("%d rows, call %d: packed weights changed the result", m, call)
					}
				}
				if st := packing.Stats(); st.PackedBytes == 0 {
					t.Fatalf("after %d rows: nothing packed", m)
				}
			}
			before := packing.Stats().PackedBytes
			packing.QuantizedMatmul(arr(packing, tensor.BF16, tensor.Shape{8, c.k}, make([]float64, 8*c.k)...), copied, true)
			if after := packing.Stats().PackedBytes; after != before {
				t.Fatalf("weights copied into the backend were packed: PackedBytes %d -> %d", before, after)
			}
			packing.Release(borrowed.W)
			if st := packing.Stats(); st.PackedBytes != 0 {
				t.Fatalf("PackedBytes %d after releasing the weight, want 0", st.PackedBytes)
			}
		})
	}
}

// TestDefaultPacking: the "fast" backend packs by default the weights
// whose packed copy its int8 matmul then reads at every number of rows
// (4- and 8-bit in groups of whole blocks of 32), from the first row on,
// and gives the pages of the file's mapping that held them back to the
// operating system (ReleasedBytes: the whole pages inside the codes,
// scales and biases); NoPackWeights packs nothing; every result has the
// bits of gemmRows (the one-row bits for 4-bit groups of 32, the GEMM's
// elsewhere); both options at once are an error.
func TestDefaultPacking(t *testing.T) {
	if !PackWeightsSupported() {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI, so nothing is packed here")
	}
	if _, err := New(backend.Options{Precision: "fast", PackWeights: true, NoPackWeights: true}); err == nil {
		t.Error("PackWeights with NoPackWeights: no error")
	}
	const n, k = 256, 2048 // 4-bit codes 256 KiB, scales and biases 32 KiB each
	for _, c := range []struct {
		name     string
		gs, bits int
		packs    bool
	}{{"4-bit g32", 32, 4, true}, {"4-bit g64", 64, 4, true}, {"8-bit g32", 32, 8, true}} {
		t.Run(c.name, func(t *testing.T) {
			r, plain, q := randQuant(t, "fast", n, k, c.gs, c.bits)
			f, ds := quantFile(t, plain, q)
			for _, opts := range []backend.Options{{Precision: "fast"}, {Precision: "fast", NoPackWeights: true}} {
				b := openWith(t, opts)
				wq := borrowQuant(t, b, f, c.gs, c.bits)
				for _, m := range []int{1, 3, 8} {
					xv := make([]float64, m*k)
					for i := range xv {
						xv[i] = r.NormFloat64()
					}
					want := gemmRows(t, plain, q, xv, m, k)
					if opts.NoPackWeights {
						var err error
						if want, err = plain.ToHost(plain.QuantizedMatmul(arr(plain, tensor.BF16, tensor.Shape{m, k}, xv...), q, true)); err != nil {
							t.Fatal(err)
						}
					}
					got, err := b.ToHost(b.QuantizedMatmul(arr(b, tensor.BF16, tensor.Shape{m, k}, xv...), wq, true))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Data, want.Data) {
						t.Fatalf("%+v, %d rows: the result changed", opts, m)
					}
					st := b.Stats()
					if packs := c.packs && !opts.NoPackWeights; (st.PackedBytes > 0) != packs {
						t.Fatalf("%+v, %d rows: PackedBytes %d, want packed: %v", opts, m, st.PackedBytes, packs)
					}
					checkReleased(t, st.ReleasedBytes, ds, c.packs && !opts.NoPackWeights)
				}
			}
		})
	}
}

// randQuant quantizes random n×k bfloat16 weights on a backend of the
// given precision without packing, returning the generator (seeded by gs
// and bits, for the inputs that follow), the backend and the weights.
func randQuant(t *testing.T, precision string, n, k, gs, bits int) (*rand.Rand, *Backend, backend.QuantizedArray) {
	t.Helper()
	r := rand.New(rand.NewPCG(uint64(gs), uint64(bits)))
	wv := make([]float64, n*k)
	for i := range wv {
		wv[i] = r.NormFloat64()
	}
	plain := openWith(t, backend.Options{Precision: precision, NoPackWeights: true})
	return r, plain, plain.Quantize(arr(plain, tensor.BF16, tensor.Shape{n, k}, wv...), gs, bits)
}

// quantFile writes q's codes, scales and biases (from b) to a safetensors
// file in a test directory as "w", "s" and "b" and opens it, returning the
// file and the three tensors as written.
func quantFile(t *testing.T, b *Backend, q backend.QuantizedArray) (*tensor.SafetensorsFile, []*tensor.Dense) {
	t.Helper()
	var ds []*tensor.Dense
	for _, a := range []backend.Array{q.W, q.Scales, q.Biases} {
		d, err := b.ToHost(a)
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, d)
	}
	path := filepath.Join(t.TempDir(), "w.safetensors")
	if err := tensor.WriteSafetensors(path, []string{"w", "s", "b"}, ds, nil); err != nil {
		t.Fatal(err)
	}
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, ds
}

// borrowQuant borrows quantFile's three tensors from f's mapping into b.
func borrowQuant(t *testing.T, b *Backend, f *tensor.SafetensorsFile, gs, bits int) backend.QuantizedArray {
	t.Helper()
	var mapped [3]backend.Array
	for i, name := range []string{"w", "s", "b"} {
		d, err := f.Tensor(name)
		if err != nil {
			t.Fatal(err)
		}
		mapped[i] = b.Borrow(d)
	}
	return backend.QuantizedArray{W: mapped[0], Scales: mapped[1], Biases: mapped[2], GroupSize: gs, Bits: bits}
}

// checkReleased: the tensors start 64-byte aligned in the file, so where
// they were packed (on Linux) the released bytes are all but at most a
// page at either end of each; where not, none.
func checkReleased(t *testing.T, released int64, ds []*tensor.Dense, packed bool) {
	t.Helper()
	page := int64(os.Getpagesize())
	var lo, hi int64
	if packed && runtime.GOOS == "linux" {
		for _, d := range ds {
			lo, hi = lo+int64(len(d.Data))-2*page, hi+int64(len(d.Data))
		}
	}
	if released < lo || released > hi {
		t.Fatalf("ReleasedBytes %d, want %d to %d", released, lo, hi)
	}
}

// TestReferencePacking: the "reference" backend packs by default the 4-
// and 8-bit weights read from a file's mapping (kernel.RefPackReplaces),
// gives their pages back and reads the packed copy alone, with the bits
// of a backend with NoPackWeights at one row of x (qprefB4 for 4-bit
// groups of 32, qpreflB for the lane-order shapes), three and nine
// (unpacked a slice at a time), on the call that packs and after it;
// other widths, "high" and NoPackWeights pack nothing.
func TestReferencePacking(t *testing.T) {
	if !PackWeightsSupported() {
		t.Skip("SKIPPED: this CPU lacks AVX-512 VNNI, so nothing is packed here")
	}
	const n, k = 100, 1024
	for _, c := range []struct {
		name     string
		gs, bits int
		packs    bool
	}{{"4-bit g32", 32, 4, true}, {"4-bit g64", 64, 4, true}, {"8-bit g32", 32, 8, true}, {"8-bit g128", 128, 8, true}, {"6-bit g64", 64, 6, false}} {
		t.Run(c.name, func(t *testing.T) {
			r, plain, q := randQuant(t, "reference", n, k, c.gs, c.bits)
			f, ds := quantFile(t, plain, q)
			for _, opts := range []backend.Options{{Precision: "reference"}, {Precision: "high"}, {Precision: "reference", NoPackWeights: true}} {
				b := openWith(t, opts)
				ref, rq := plain, q
				if opts.Precision == "high" {
					ref = openWith(t, backend.Options{Precision: "high"})
					rq = borrowQuant(t, ref, f, c.gs, c.bits)
				}
				wq := borrowQuant(t, b, f, c.gs, c.bits)
				for _, m := range []int{1, 1, 3, 9} {
					xv := make([]float64, m*k)
					for i := range xv {
						xv[i] = r.NormFloat64()
					}
					want, err := ref.ToHost(ref.QuantizedMatmul(arr(ref, tensor.BF16, tensor.Shape{m, k}, xv...), rq, true))
					if err != nil {
						t.Fatal(err)
					}
					got, err := b.ToHost(b.QuantizedMatmul(arr(b, tensor.BF16, tensor.Shape{m, k}, xv...), wq, true))
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got.Data, want.Data) {
						t.Fatalf("%+v, %d rows: the result changed", opts, m)
					}
					packs := c.packs && opts.Precision == "reference" && !opts.NoPackWeights
					if st := b.Stats(); (st.PackedBytes > 0) != packs {
						t.Fatalf("%+v, %d rows: PackedBytes %d, want packed: %v", opts, m, st.PackedBytes, packs)
					}
					checkReleased(t, b.Stats().ReleasedBytes, ds, packs)
				}
			}
		})
	}
}

// gemmRows returns the m rows of x (xv, m×k) times the quantized weight q
// on the "fast" backend b (without packed weights) as the packed panels
// give them: for 4-bit groups of 32 the plain result (their one-row order
// at any number of rows), else the first m rows of a batch of at least
// eight (the int8 GEMM's order, which a row keeps whatever the rows
// beside it).
func gemmRows(t *testing.T, b *Backend, q backend.QuantizedArray, xv []float64, m, k int) *tensor.Dense {
	t.Helper()
	rows := m
	if !(q.Bits == 4 && q.GroupSize == 32) {
		rows = max(m, 8)
	}
	pad := append(append([]float64(nil), xv...), make([]float64, (rows-m)*k)...)
	d, err := b.ToHost(b.QuantizedMatmul(arr(b, tensor.BF16, tensor.Shape{rows, k}, pad...), q, true))
	if err != nil {
		t.Fatal(err)
	}
	n := d.Shape[len(d.Shape)-1]
	return &tensor.Dense{DType: d.DType, Shape: tensor.Shape{m, n}, Data: d.Data[:m*n*d.DType.Size()]}
}

// TestDensePacking: the "reference" backend packs by default float16 and
// bfloat16 weight matrices read from a file's mapping through nn.Dense's
// Matmul(x, Transpose(W)) where its AVX-512 kernels take them
// (DensePackingSupported), gives the pages that held them back (all but at
// most a page at either end), and gives the bytes of a backend with
// NoPackWeights at one, two and nine rows of x, on the call that packs and
// after it; "high" packs nothing, nor does "fast" but on a CPU with AMX-BF16
// (DenseAMXPackingSupported), where it packs into the tile layout
// (kernel.DenseAMXReplaces) and its results, other bits than the unpacked
// kernels', are held to the float64 sum within kernel.DenseFastBoundW and
// the output's rounding; releasing the weight frees the copy.
func TestDensePacking(t *testing.T) {
	if !DensePackingSupported() {
		t.Skip("SKIPPED: this CPU lacks the AVX-512 dense kernels, so nothing dense is packed here")
	}
	const n, k = 300, 1024 // 600 KiB of 16-bit weights
	for _, dt := range []tensor.DType{tensor.F16, tensor.BF16} {
		t.Run(dt.String(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(uint64(n), 3))
			wv := make([]float64, n*k)
			for i := range wv {
				wv[i] = r.NormFloat64()
			}
			plain := openWith(t, backend.Options{NoPackWeights: true})
			wd, err := plain.ToHost(arr(plain, dt, tensor.Shape{n, k}, wv...))
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), "w.safetensors")
			if err := tensor.WriteSafetensors(path, []string{"w"}, []*tensor.Dense{wd}, nil); err != nil {
				t.Fatal(err)
			}
			f, err := tensor.OpenSafetensors(path)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			amx := DenseAMXPackingSupported()
			for _, c := range []struct {
				opts  backend.Options
				packs bool
			}{{backend.Options{}, true}, {backend.Options{NoPackWeights: true}, false}, {backend.Options{Precision: "fast"}, amx}, {backend.Options{Precision: "high"}, false}} {
				tile := c.packs && c.opts.Precision == "fast"
				ref := openWith(t, backend.Options{Precision: c.opts.Precision, NoPackWeights: true})
				b := openWith(t, c.opts)
				d, err := f.Tensor("w")
				if err != nil {
					t.Fatal(err)
				}
				w := b.Borrow(d)
				for _, m := range []int{1, 2, 9} {
					xv := make([]float64, m*k)
					for i := range xv {
						xv[i] = r.NormFloat64()
					}
					want, err := ref.ToHost(ref.Matmul(arr(ref, dt, tensor.Shape{m, k}, xv...), ref.Transpose(ref.FromHost(wd), 1, 0)))
					if err != nil {
						t.Fatal(err)
					}
					for call := range 2 {
						wt := b.Transpose(w, 1, 0)
						got, err := b.ToHost(b.Matmul(arr(b, dt, tensor.Shape{m, k}, xv...), wt))
						if err != nil {
							t.Fatal(err)
						}
						b.Release(wt)
						if tile {
							checkDenseFast(t, got, xv, wd, m, n, k)
						} else if !bytes.Equal(got.Data, want.Data) {
							t.Fatalf("%+v, %d rows, call %d: packing changed the result", c.opts, m, call)
						}
					}
					st := b.Stats()
					size := int64(2 * 16 * ((n + 15) / 16) * k)
					if tile {
						size = int64(2 * 64 * ((n + 63) / 64) * k)
					}
					if c.packs && st.PackedBytes != size || !c.packs && st.PackedBytes != 0 {
						t.Fatalf("%+v, %d rows: PackedBytes %d, want packed: %v", c.opts, m, st.PackedBytes, c.packs)
					}
					page := int64(os.Getpagesize())
					var lo, hi int64
					if c.packs && runtime.GOOS == "linux" {
						lo, hi = int64(len(wd.Data))-2*page, int64(len(wd.Data))
					}
					if st.ReleasedBytes < lo || st.ReleasedBytes > hi {
						t.Fatalf("%+v, %d rows: ReleasedBytes %d, want %d to %d", c.opts, m, st.ReleasedBytes, lo, hi)
					}
				}
				b.Release(w)
				if st := b.Stats(); st.PackedBytes != 0 {
					t.Fatalf("%+v: PackedBytes %d after releasing the weight, want 0", c.opts, st.PackedBytes)
				}
			}
		})
	}
}

// checkDenseFast holds the m×n product got (in w's dtype) of x [m, k]
// (float64 values, rounded to w's dtype as arr does) and w [n, k] to the
// float64 sum: within kernel.DenseFastBoundW plus the output's rounding to
// the dtype (half an ulp: 2^-8 relative for bfloat16, 2^-11 for float16).
func checkDenseFast(t *testing.T, got *tensor.Dense, xv []float64, w *tensor.Dense, m, n, k int) {
	t.Helper()
	gv, wv := got.ToFloat64(), w.ToFloat64()
	round := func(f float64) float64 {
		if w.DType == tensor.BF16 {
			return float64(tensor.RoundBF16(float32(f)))
		}
		return float64(tensor.RoundF16(float32(f)))
	}
	u := 0x1p-8
	if w.DType == tensor.F16 {
		u = 0x1p-11
	}
	for i := range m {
		for j := range n {
			var sum, abs float64
			for l := range k {
				p := round(xv[i*k+l]) * wv[j*k+l]
				sum += p
				abs += math.Abs(p)
			}
			bound := kernel.DenseFastBoundW(k, abs, true)
			bound += (math.Abs(sum) + bound) * u
			if err := math.Abs(gv[i*n+j] - sum); !(err <= bound) {
				t.Fatalf("%s output (%d, %d) = %v, exact %v: error %g over the bound %g", w.DType, i, j, gv[i*n+j], sum, err, bound)
			}
		}
	}
}

// quantHost copies q's codes, scales and biases to the host (for Borrow, as
// a checkpoint's mapping is borrowed).
func quantHost(t *testing.T, b *Backend, q backend.QuantizedArray) (w, scales, biases *tensor.Dense) {
	t.Helper()
	host := func(a backend.Array) *tensor.Dense {
		d, err := b.ToHost(a)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	return host(q.W), host(q.Scales), host(q.Biases)
}
