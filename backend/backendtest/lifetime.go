package backendtest

import (
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// runLifetime checks Name, Do, Close, OracleExact and the Memory interface.
func runLifetime(t *testing.T, open func() (backend.Backend, error)) {
	for _, c := range []struct {
		name string
		fn   func(*testing.T, func() (backend.Backend, error))
	}{
		{"Identity", testIdentity},
		{"Do", testDo},
		{"Stats", testStats},
		{"Scopes", testScopes},
		{"KeepToOutermost", testKeepToOutermost},
		{"ScopeOrder", testScopeOrder},
		{"ReleasedUse", testReleasedUse},
		{"ForeignAndNil", testForeign},
		{"Recover", testRecover},
		{"SafetyNet", testSafetyNet},
		{"NoGrowth", testNoGrowth},
		{"Close", testClose},
		{"Transfers", testTransfers},
		{"Borrow", testBorrow},
		{"ZerosFull", testZerosFull},
		{"Optional", testOptional},
	} {
		t.Run(c.name, func(t *testing.T) { c.fn(t, open) })
	}
}

// alive reports whether x can still be used: an op on it succeeds.
func alive(b backend.Backend, x backend.Array) bool {
	return catch(func() { b.Release(b.Unary(backend.Negative, x)) }) == nil
}

func f32(b backend.Backend, shape ...int) backend.Array { return b.Zeros(shape, tensor.F32) }

// Name is a non-empty constant; OracleExact is a declared property that does
// not change while the backend is open.
func testIdentity(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	if b.Name() == "" || b.Name() != b.Name() {
		t.Errorf("Name: got %q, want a non-empty constant", b.Name())
	}
	exact := b.OracleExact()
	x := b.Full(tensor.Shape{3}, 2, tensor.F32)
	b.Release(b.Unary(backend.Exp, x), x)
	if b.OracleExact() != exact {
		t.Errorf("OracleExact changed from %v to %v after ops", exact, b.OracleExact())
	}
	t.Logf("%s: OracleExact %v", b.Name(), exact)
}

// Do runs its function (ops included) and returns its error unchanged.
func testDo(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	ran := false
	if err := b.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Do: ran %v, err %v; want true, nil", ran, err)
	}
	want := errors.New("x")
	if err := b.Do(func() error { return want }); err != want {
		t.Errorf("Do: got %v, want the function's own error", err)
	}
	var got []float64
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		x := b.Full(tensor.Shape{2}, 1.5, tensor.F32)
		y := b.Binary(backend.Multiply, x, x)
		d, err := b.ToHost(y)
		b.Release(x, y)
		if err == nil {
			got = d.ToFloat64()
		}
		return err
	})
	if err != nil || len(got) != 2 || got[0] != 2.25 || got[1] != 2.25 { // 1.5·1.5, exact
		t.Errorf("ops inside Do: got %v, %v; want [2.25 2.25], nil", got, err)
	}
}

// Stats counts arrays and their bytes as they are made and released;
// PeakBytes keeps the most; releasing twice or releasing nil changes nothing.
func testStats(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	if s := b.Stats(); s != (backend.Stats{}) {
		t.Fatalf("fresh backend: got %+v, want zero Stats", s)
	}
	const n = 5
	var as []backend.Array
	for i := range n {
		as = append(as, f32(b, i+1, 2)) // (i+1)·2·4 bytes
	}
	// 8·(1+2+3+4+5) = 120 bytes
	if s := b.Stats(); s.LiveArrays != n || s.LiveBytes != 120 || s.PeakBytes != 120 {
		t.Fatalf("after Zeros: got %+v, want 5 arrays, 120 bytes, peak 120", s)
	}
	// Full of 3 bf16 (6 bytes), FromHost of 4 int32 (16 bytes).
	h := b.Full(tensor.Shape{3}, 1, tensor.BF16)
	i := b.FromHost(tensor.FromInt32(tensor.Shape{4}, []int32{1, 2, 3, 4}))
	if s := b.Stats(); s.LiveArrays != n+2 || s.LiveBytes != 142 || s.PeakBytes != 142 {
		t.Errorf("after Full and FromHost: got %+v, want 7 arrays, 142 bytes, peak 142", s)
	}
	// An op's float32 result of 5·2 elements: 40 bytes more.
	y := b.Binary(backend.Add, as[4], as[4])
	if s := b.Stats(); s.LiveArrays != n+3 || s.LiveBytes != 182 || s.PeakBytes != 182 {
		t.Errorf("after an op: got %+v, want 8 arrays, 182 bytes, peak 182", s)
	}
	b.Release(y, h, i)
	b.Release(as...)
	b.Release(as...) // twice is allowed
	b.Release(nil)
	b.Release()
	if s := b.Stats(); s.LiveArrays != 0 || s.LiveBytes != 0 || s.PeakBytes != 182 || s.LeakedByGC != 0 {
		t.Fatalf("after Release: got %+v, want 0 arrays, 0 bytes, peak 182, 0 leaked", s)
	}
	// The peak is a high-water mark: a smaller array later leaves it alone.
	b.Release(f32(b, 1))
	if s := b.Stats(); s.PeakBytes != 182 {
		t.Errorf("peak after a smaller array: got %d, want 182", s.PeakBytes)
	}
}

// Nested scopes: an inner scope's Close releases its arrays except the kept
// ones, which move to the enclosing scope; Keep of arrays already outside the
// scope leaves them where they are; Keep returns its first argument.
func testScopes(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	root := f32(b, 1)
	outer := b.Scope()
	o1 := f32(b, 1)
	inner := b.Scope()
	i1, i2 := f32(b, 1), f32(b, 2)
	if got := inner.Keep(i1, root, o1); got != i1 {
		t.Errorf("Keep returned %v, want its first argument", got)
	}
	if got := inner.Keep(); got != nil {
		t.Errorf("Keep(): got %v, want nil", got)
	}
	inner.Close()
	inner.Close() // twice is allowed
	if alive(b, i2) || !alive(b, i1) {
		t.Errorf("after the inner Close: i2 alive %v (want false), i1 alive %v (want true)", alive(b, i2), alive(b, i1))
	}
	if s := b.Stats(); s.LiveArrays != 3 || s.LiveBytes != 12 {
		t.Errorf("after the inner Close: got %+v, want 3 arrays (root, o1, i1) of 12 bytes", s)
	}
	kept := outer.Keep(f32(b, 1))
	outer.Close()
	if alive(b, o1) || alive(b, i1) {
		t.Errorf("the outer Close left o1 (%v) or i1 (%v) alive", alive(b, o1), alive(b, i1))
	}
	if !alive(b, root) || !alive(b, kept) {
		t.Errorf("the outer Close released root (alive %v) or a kept array (alive %v)", alive(b, root), alive(b, kept))
	}
	if s := b.Stats(); s.LiveArrays != 2 {
		t.Errorf("after the outer Close: got %+v, want 2 arrays (root, kept)", s)
	}
	b.Release(root, kept)
}

// Keep through every level reaches the outermost level, where only Release
// frees an array; an array kept there is not leaked when its scopes close.
func testKeepToOutermost(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	s1 := b.Scope()
	s2 := b.Scope()
	x := s2.Keep(b.Full(tensor.Shape{4}, 3, tensor.F32))
	s2.Close()
	s1.Keep(x)
	s1.Close()
	if st := b.Stats(); st.LiveArrays != 1 || st.LiveBytes != 16 {
		t.Errorf("after both Closes: got %+v, want the kept array (16 bytes)", st)
	}
	if d := host(t, b, x); d != nil && d.ToFloat64()[3] != 3 {
		t.Errorf("kept array: got %v, want 3s", d.ToFloat64())
	}
	b.Release(x)
	if alive(b, x) {
		t.Errorf("kept array alive after Release")
	}
}

// Closing a scope closes the inner scopes still open first; Keep on a
// closed scope, or of an array of a still-open inner scope, is an error.
func testScopeOrder(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	outer := b.Scope()
	b.Scope()
	x := f32(b, 1)
	outer.Close()
	if alive(b, x) {
		t.Errorf("closing the outer scope left the inner scope's array alive")
	}
	y := f32(b, 1) // at the outermost level again
	if st := b.Stats(); st.LiveArrays != 1 {
		t.Errorf("after the outer Close: got %+v, want 1 array (y)", st)
	}
	b.Release(y)
	s := b.Scope()
	in := b.Scope()
	z := f32(b, 1)
	wantOpError(t, "Keep of an inner scope's array", func() { s.Keep(z) })
	in.Close()
	s.Close()
	w := f32(b, 1)
	wantOpError(t, "Keep on a closed scope", func() { s.Keep(w) })
	b.Release(w)
}

// Every use of a released array is an *OpError, which Recover inside Do
// turns into Do's error; its Shape and DType stay valid.
func testReleasedUse(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	x := f32(b, 2)
	b.Release(x)
	for name, fn := range map[string]func(){
		"Unary":     func() { b.Unary(backend.Exp, x) },
		"Binary":    func() { b.Binary(backend.Add, x, x) },
		"ToHost":    func() { b.ToHost(x) },
		"Eval":      func() { b.Eval(x) },
		"Reshape":   func() { b.Reshape(x, 2, 1) },
		"Sum":       func() { b.Sum(x, 0, false) },
		"Matmul":    func() { b.Matmul(x, x) },
		"Keep":      func() { s := b.Scope(); defer s.Close(); s.Keep(x) },
		"AsType":    func() { b.AsType(x, tensor.BF16) },
		"SliceUpd":  func() { b.SliceUpdate(x, x, []int{0}) },
		"RMSNorm":   func() { b.RMSNorm(x, nil, 1e-5) },
		"Quantize":  func() { b.Quantize(x, 32, 4) },
		"Take":      func() { b.Take(x, x, 0) },
		"Softmax":   func() { b.Softmax(x, 0, true) },
		"Transpose": func() { b.Transpose(x, 0) },
	} {
		wantOpError(t, name+" of a released array", fn)
	}
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		b.Unary(backend.Exp, x)
		return nil
	})
	var oe *backend.OpError
	if !errors.As(err, &oe) {
		t.Errorf("Do with an op on a released array: got %v, want an *backend.OpError", err)
	}
	if !x.Shape().Equal(tensor.Shape{2}) || x.DType() != tensor.F32 {
		t.Errorf("metadata after Release: got %v %v, want F32 [2]", x.DType(), x.Shape())
	}
	// The backend works on.
	y := b.Full(tensor.Shape{1}, 2, tensor.F32)
	z := b.Binary(backend.Add, y, y)
	if d := host(t, b, z); d == nil || d.ToFloat64()[0] != 4 {
		t.Errorf("an op after the errors: got %v, want [4]", d)
	}
	b.Release(y, z)
}

// An array of another backend instance, or nil, is an *OpError in any op;
// releasing another backend's array is one too.
func testForeign(t *testing.T, open func() (backend.Backend, error)) {
	b1, b2 := openB(t, open), openB(t, open)
	x := f32(b1, 1)
	y := f32(b2, 1)
	wantOpError(t, "Unary of a foreign array", func() { b2.Unary(backend.Exp, x) })
	wantOpError(t, "Binary of a foreign and an own array", func() { b2.Binary(backend.Add, y, x) })
	wantOpError(t, "ToHost of a foreign array", func() { b2.ToHost(x) })
	wantOpError(t, "Release of a foreign array", func() { b2.Release(x) })
	wantOpError(t, "Keep of a foreign array", func() { s := b2.Scope(); defer s.Close(); s.Keep(x) })
	wantOpError(t, "Unary of nil", func() { b1.Unary(backend.Exp, nil) })
	wantOpError(t, "Binary with nil", func() { b1.Binary(backend.Add, x, nil) })
	if !alive(b1, x) || !alive(b2, y) {
		t.Errorf("the failed calls released an array")
	}
	b1.Release(x)
	b2.Release(y)
}

// An op called against its contract panics with an *OpError naming the op
// and the argument shapes and dtypes; Recover returns it as an error and the
// backend goes on working.
func testRecover(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	var out backend.Array
	err := b.Do(func() (err error) {
		defer backend.Recover(&err)
		s := b.Scope()
		defer s.Close()
		out = b.Matmul(f32(b, 2, 3), f32(b, 2, 3))
		return nil
	})
	var oe *backend.OpError
	if out != nil || !errors.As(err, &oe) || oe.Op != "Matmul" {
		t.Fatalf("Matmul [2 3]·[2 3]: got (%v, %v), want an *backend.OpError of Matmul", out, err)
	}
	if msg := err.Error(); !strings.Contains(msg, "[2 3]") || !strings.Contains(msg, "F32") {
		t.Errorf("message %q should name the shapes and dtypes", msg)
	}
	for name, fn := range map[string]func(){
		"Binary":      func() { b.Binary(backend.Add, f32(b, 2, 3), f32(b, 4, 5)) },
		"Reshape":     func() { b.Reshape(f32(b, 2, 3), 7) },
		"Zeros":       func() { b.Zeros(tensor.Shape{-1}, tensor.F32) },
		"Concatenate": func() { b.Concatenate(0, f32(b, 2, 3), f32(b, 2, 4)) },
		"Slice":       func() { b.Slice(f32(b, 2, 3), []int{0, 0}, []int{3, 3}) },
		"RMSNorm":     func() { b.RMSNorm(f32(b, 2, 8), f32(b, 5), 1e-5) },
		"Quantize":    func() { b.Quantize(f32(b, 4, 48), 64, 4) },
		"SDPA": func() {
			b.ScaledDotProductAttention(f32(b, 1, 3, 2, 8), f32(b, 1, 2, 4, 8), f32(b, 1, 2, 4, 8), 1, backend.NoMask{})
		},
	} {
		s := b.Scope()
		wantOpError(t, name+" against its contract", fn)
		s.Close()
	}
	x := b.Full(tensor.Shape{2}, 1.5, tensor.F32)
	y := b.Binary(backend.Multiply, x, x)
	if d := host(t, b, y); d == nil || d.ToFloat64()[1] != 2.25 { // 1.5·1.5, exact
		t.Errorf("an op after the errors: got %v, want [2.25 2.25]", d)
	}
	b.Release(x, y)
}

// An array at the outermost level dropped without Release is found by the
// garbage-collector safety net: counted in LeakedByGC and no longer live. An
// array of an open scope is never counted (its scope holds it).
func testSafetyNet(t *testing.T, open func() (backend.Backend, error)) {
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s := b.Scope()
	func() { f32(b, 64) }() // dropped in a scope: its Close frees it
	runtime.GC()
	s.Close()
	func() { f32(b, 1024) }() // dropped without Release at the outermost level
	deadline := time.Now().Add(5 * time.Second)
	for b.Stats().LeakedByGC == 0 && time.Now().Before(deadline) {
		runtime.GC()
		if err := b.Eval(); err != nil { // a lazy backend frees the handle here
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := b.Eval(); err != nil {
		t.Fatal(err)
	}
	if st := b.Stats(); st.LeakedByGC != 1 || st.LiveArrays != 0 || st.LiveBytes != 0 {
		t.Errorf("after GC: got %+v, want 1 leaked and nothing live", st)
	}
}

// A small graph run many times in a scope leaves the live arrays and bytes
// where they were, and the peak stops moving after the first iteration.
func testNoGrowth(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	g := newGen("nogrowth")
	w := b.FromHost(dense(tensor.BF16, tensor.Shape{16, 16}, g.normal(256, 1)))
	x := b.FromHost(dense(tensor.BF16, tensor.Shape{2, 16}, g.normal(32, 1)))
	step := func() {
		err := b.Do(func() (err error) {
			defer backend.Recover(&err)
			s := b.Scope()
			defer s.Close()
			h := b.Matmul(x, w)
			h = b.Unary(backend.SiLU, b.RMSNorm(h, nil, 1e-5))
			h = b.Softmax(b.Binary(backend.Add, h, x), -1, true)
			h = b.Concatenate(0, h, b.Slice(h, []int{0, 0}, []int{1, 16}))
			_, err = b.ToHost(b.Sum(h, 1, false))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	step()
	base := b.Stats()
	for range 200 {
		step()
	}
	if s := b.Stats(); s.LiveArrays != base.LiveArrays || s.LiveBytes != base.LiveBytes || s.PeakBytes != base.PeakBytes {
		t.Errorf("after 200 more iterations: got %+v, want %+v", s, base)
	}
	b.Release(w, x)
}

// Close releases every array (outermost and scoped) and invalidates the
// backend: arrays and ops then fail with an *OpError. Closing twice is
// allowed, and so is closing a scope after the backend.
func testClose(t *testing.T, open func() (backend.Backend, error)) {
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	x := f32(b, 1)
	s := b.Scope()
	y := f32(b, 1)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	s.Close()
	if st := b.Stats(); st.LiveArrays != 0 || st.LiveBytes != 0 {
		t.Errorf("after Close: got %+v, want nothing live", st)
	}
	wantOpError(t, "an op on an array after Close", func() { b.Unary(backend.Exp, x) })
	wantOpError(t, "ToHost of a scoped array after Close", func() { b.ToHost(y) })
	wantOpError(t, "Zeros after Close", func() { b.Zeros(tensor.Shape{1}, tensor.F32) })
}

// FromHost and ToHost copy: changing the host tensor afterwards changes
// nothing in the array, and every dtype round-trips bit for bit.
func testTransfers(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	inDo(t, b, func() {
		src := tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})
		a := b.FromHost(src)
		src.Float32s()[0] = 7
		if d := host(t, b, a); d == nil || d.Float32s()[0] != 1 {
			t.Errorf("FromHost did not copy: got %v, want [1 2]", d)
		}
		if d := host(t, b, a); d != nil {
			d.Float32s()[1] = 7
		}
		if d := host(t, b, a); d == nil || d.Float32s()[1] != 2 {
			t.Errorf("ToHost did not copy: got %v, want [1 2]", d)
		}
		wantOpError(t, "FromHost of a tensor whose data does not fit its shape", func() {
			b.FromHost(&tensor.Dense{DType: tensor.F32, Shape: tensor.Shape{3}, Data: make([]byte, 8)})
		})
		g := newGen("transfers")
		for _, dt := range []tensor.DType{tensor.Bool, tensor.U8, tensor.I8, tensor.U16, tensor.I16, tensor.U32, tensor.I32, tensor.I64, tensor.F16, tensor.BF16, tensor.F32} {
			for _, shape := range []tensor.Shape{{}, {0}, {3, 0, 2}, {1}, {2, 3, 5}} {
				raw := make([]byte, shape.Size()*dt.Size())
				for i := range raw {
					raw[i] = byte(g.r.IntN(256))
					if dt == tensor.Bool {
						raw[i] &= 1
					}
				}
				d := &tensor.Dense{DType: dt, Shape: shape, Data: raw}
				got := host(t, b, b.FromHost(d))
				if got != nil && string(got.Data) != string(raw) {
					t.Errorf("%v %v: the round trip changed the bytes", dt, shape)
				}
			}
		}
	})
}

// Borrow gives an array with the host tensor's values; ops on it never write
// the host memory. Borrowed memory is not counted in LiveBytes (a backend
// that copies may count its copy).
func testBorrow(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	src := tensor.FromFloat32(tensor.Shape{4}, []float32{1, 2, 3, 4})
	before := b.Stats()
	a := b.Borrow(src)
	if s := b.Stats(); s.LiveArrays != before.LiveArrays+1 || s.LiveBytes > before.LiveBytes+16 {
		t.Errorf("after Borrow: got %+v, want one more array and at most 16 more bytes", s)
	}
	inDo(t, b, func() {
		u := b.SliceUpdate(a, b.Full(tensor.Shape{1}, 9, tensor.F32), []int{0})
		if d := host(t, b, u); d == nil || d.Float32s()[0] != 9 || d.Float32s()[3] != 4 {
			t.Errorf("SliceUpdate of a borrowed array: got %v, want [9 2 3 4]", d)
		}
		b.Release(b.Binary(backend.Add, a, a))
	})
	if src.Float32s()[0] != 1 {
		t.Errorf("an op wrote borrowed memory: got %v, want 1", src.Float32s()[0])
	}
	b.Release(a)
}

// Zeros and Full: any shape, Full's value converted to the dtype as astype
// does (through float32 for half types, truncation toward zero for
// integers), a negative dimension an error.
func testZerosFull(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	inDo(t, b, func() {
		cases := []struct {
			a    backend.Array
			dt   tensor.DType
			s    tensor.Shape
			want float64
		}{
			// 0.1 in bf16: 0.1 = 1.6·2^-4; 0.6·128 = 76.8 rounds to 77, (1+77/128)/16 = 0.10009765625.
			{b.Full(tensor.Shape{2}, 0.1, tensor.BF16), tensor.BF16, tensor.Shape{2}, 0.10009765625},
			// 0.1 in f16: 0.6·1024 = 614.4 rounds to 614, (1+614/1024)/16 = 0.0999755859375.
			{b.Full(tensor.Shape{3, 1}, 0.1, tensor.F16), tensor.F16, tensor.Shape{3, 1}, 0.0999755859375},
			{b.Full(tensor.Shape{1, 2}, -2.7, tensor.I32), tensor.I32, tensor.Shape{1, 2}, -2},
			{b.Full(tensor.Shape{}, 3, tensor.F32), tensor.F32, tensor.Shape{}, 3},
			{b.Full(tensor.Shape{2}, 2, tensor.Bool), tensor.Bool, tensor.Shape{2}, 1},
			{b.Full(tensor.Shape{2, 0}, 5, tensor.F32), tensor.F32, tensor.Shape{2, 0}, 0},
			{b.Zeros(tensor.Shape{3}, tensor.F16), tensor.F16, tensor.Shape{3}, 0},
			{b.Zeros(tensor.Shape{2, 2}, tensor.U32), tensor.U32, tensor.Shape{2, 2}, 0},
			{b.Zeros(tensor.Shape{0}, tensor.BF16), tensor.BF16, tensor.Shape{0}, 0},
		}
		for i, c := range cases {
			want := nd{c.s, make([]float64, c.s.Size())}
			for k := range want.v {
				want.v[k] = c.want
			}
			compare(t, caseName("ZerosFull", i), host(t, b, c.a), c.dt, want, exactBudget, true, nil)
		}
		wantOpError(t, "Zeros with a negative dimension", func() { b.Zeros(tensor.Shape{2, -1}, tensor.F32) })
		wantOpError(t, "Full with a negative dimension", func() { b.Full(tensor.Shape{-3}, 1, tensor.F32) })
	})
}

// The optional interfaces, where implemented: AsyncEval starts a
// computation whose result ToHost then reads; ClearCache leaves live arrays
// and Stats' counts alone.
func testOptional(t *testing.T, open func() (backend.Backend, error)) {
	b := openB(t, open)
	x := b.Full(tensor.Shape{3}, 2, tensor.F32)
	y := b.Binary(backend.Multiply, x, x)
	if ae, ok := b.(backend.AsyncEvaler); ok {
		if err := ae.AsyncEval(y); err != nil {
			t.Errorf("AsyncEval: %v", err)
		}
	} else {
		t.Logf("%s does not implement backend.AsyncEvaler", b.Name())
	}
	if cc, ok := b.(backend.CacheClearer); ok {
		s := b.Stats()
		cc.ClearCache()
		if s2 := b.Stats(); s2.LiveArrays != s.LiveArrays || s2.LiveBytes != s.LiveBytes {
			t.Errorf("ClearCache changed Stats from %+v to %+v", s, s2)
		}
	} else {
		t.Logf("%s does not implement backend.CacheClearer", b.Name())
	}
	if d := host(t, b, y); d == nil || d.ToFloat64()[2] != 4 {
		t.Errorf("after AsyncEval and ClearCache: got %v, want [4 4 4]", d)
	}
	b.Release(x, y)
}
