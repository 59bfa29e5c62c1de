package nn_test

import (
	"fmt"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/backend/cpu"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/tensor"
)

// TestFullKVCache follows mlx_lm's KVCache.update_and_fetch through growth,
// a misaligned grow, a trim and an overwrite. The capacities are worked out
// by hand from its rule (grow when offset+L > capacity, by ceil(L/256)·256
// slots, after cutting the buffer to offset when offset % 256 != 0):
//
//	L=3   at 0:   cap 256
//	L=253 at 3:   256 <= 256, cap 256
//	L=1   at 256: grow by 256 (offset aligned, no cut), cap 512
//	L=300 at 257: grow by 512, cut to 257 first, cap 257+512 = 769
//	L=5   at 557: cap 769
//	trim 10 → offset 552; L=2 at 552: cap 769
func TestFullKVCache(t *testing.T) {
	b, err := cpu.New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const B, H, D = 1, 2, 4
	c := nn.NewFullKVCache(b)
	base := b.Stats()
	// Host mirrors, one slice per head of offset·D values.
	keys, values := make([][]float32, H), make([][]float32, H)
	write := func(store [][]float32, off, L int, src []float32) {
		for h := range store {
			store[h] = append(store[h][:off*D], src[h*L*D:(h+1)*L*D]...)
		}
	}
	flat := func(store [][]float32) []float32 {
		var out []float32
		for _, r := range store {
			out = append(out, r...)
		}
		return out
	}
	steps := []struct {
		L, trim, wantCap int
	}{{3, 0, 256}, {253, 0, 256}, {1, 0, 512}, {300, 0, 769}, {5, 0, 769}, {2, 10, 769}}
	val := float32(0)
	for i, s := range steps {
		name := fmt.Sprintf("step%d/L%d", i, s.L)
		if s.trim > 0 {
			if got := c.Trim(s.trim); got != s.trim {
				t.Fatalf("Trim(%d): got %d, want %d (%s)", s.trim, got, s.trim, name)
			}
		}
		kh := make([]float32, H*s.L*D)
		vh := make([]float32, H*s.L*D)
		for j := range kh {
			val++
			kh[j], vh[j] = val, -val
		}
		prev := c.Offset()
		k := b.FromHost(tensor.FromFloat32(tensor.Shape{B, H, s.L, D}, kh))
		v := b.FromHost(tensor.FromFloat32(tensor.Shape{B, H, s.L, D}, vh))
		gk, gv := c.Update(k, v)
		b.Release(k, v)
		if c.Offset() != prev+s.L {
			t.Fatalf("offset: got %d, want %d (%s)", c.Offset(), prev+s.L, name)
		}
		if c.Capacity() != s.wantCap {
			t.Fatalf("capacity: got %d, want %d (%s)", c.Capacity(), s.wantCap, name)
		}
		if got := gk.Shape(); !got.Equal(tensor.Shape{B, H, c.Offset(), D}) {
			t.Fatalf("keys shape: got %v, want [%d %d %d %d] (%s)", got, B, H, c.Offset(), D, name)
		}
		write(keys, prev, s.L, kh)
		write(values, prev, s.L, vh)
		for _, x := range []struct {
			name string
			got  backend.Array
			want []float32
		}{{"keys", gk, flat(keys)}, {"values", gv, flat(values)}} {
			d, err := b.ToHost(x.got)
			if err != nil {
				t.Fatal(err)
			}
			got := d.Float32s()
			for j := range x.want {
				if got[j] != x.want[j] {
					t.Fatalf("%s[%d]: got %v, want %v (%s)", x.name, j, got[j], x.want[j], name)
				}
			}
		}
		b.Release(gk, gv)
		st := b.Stats()
		if got, want := st.LiveArrays-base.LiveArrays, 2; got != want {
			t.Errorf("live arrays: got %d more than before, want %d (the two buffers) (%s)", got, want, name)
		}
		if got, want := st.LiveBytes-base.LiveBytes, int64(2*B*H*s.wantCap*D*4); got != want {
			t.Errorf("live bytes: got %d more than before, want %d (%s)", got, want, name)
		}
	}
	if _, ok := c.Mask(1).(backend.NoMask); !ok {
		t.Errorf("Mask(1): got %T, want backend.NoMask", c.Mask(1))
	}
	if _, ok := c.Mask(5).(backend.CausalMask); !ok {
		t.Errorf("Mask(5): got %T, want backend.CausalMask", c.Mask(5))
	}
	if got := c.Trim(-3); got != 0 {
		t.Errorf("Trim(-3): got %d, want 0", got)
	}
	c.Release()
	if st := b.Stats(); st.LiveArrays != base.LiveArrays || st.LiveBytes != base.LiveBytes {
		t.Errorf("after Release: %d arrays, %d bytes live, want %d, %d", st.LiveArrays, st.LiveBytes, base.LiveArrays, base.LiveBytes)
	}
	if c.Offset() != 0 || c.State() != nil {
		t.Errorf("after Release: offset %d, state %v, want 0 and nil", c.Offset(), c.State())
	}
}
