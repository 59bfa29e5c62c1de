package cpu

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

func TestNewOptions(t *testing.T) {
	cases := []struct {
		opts    backend.Options
		wantErr string // "" for success
		high    bool
	}{
		{backend.Options{}, "", false},
		{backend.Options{Precision: "reference"}, "", false},
		{backend.Options{Precision: "high"}, "", true},
		{backend.Options{Precision: "fast"}, "", false},
		{backend.Options{Precision: "turbo"}, `"turbo"`, false},
		{backend.Options{Device: "cpu"}, "", false},
		{backend.Options{Device: "gpu"}, `"gpu"`, false},
		{backend.Options{Threads: -1}, "Threads is -1", false},
	}
	for _, c := range cases {
		t.Run(name(c.opts.Precision, c.opts.Device, c.opts.Threads), func(t *testing.T) {
			b, err := New(c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got error %v, want one containing %s", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("got error %v, want none", err)
			}
			if b.high != c.high {
				t.Errorf("high: got %v, want %v", b.high, c.high)
			}
		})
	}
}

func TestRegistered(t *testing.T) {
	b, err := backend.Open("cpu", backend.Options{})
	if err != nil {
		t.Fatalf("Open(cpu): %v", err)
	}
	defer b.Close()
	if b.Name() != "cpu" {
		t.Errorf("Name: got %q, want cpu", b.Name())
	}
	ran := false
	if err := b.Do(func() error { ran = true; return nil }); err != nil || !ran {
		t.Errorf("Do: ran %v, err %v; want true, nil", ran, err)
	}
	want := errors.New("x")
	if err := b.Do(func() error { return want }); err != want {
		t.Errorf("Do: got %v, want the function's error", err)
	}
}

func TestBorrow(t *testing.T) {
	b := open(t)
	src := tensor.FromFloat32(tensor.Shape{2}, []float32{1, 2})
	a := b.Borrow(src)
	if s := b.Stats(); s.LiveArrays != 1 || s.LiveBytes != 0 {
		t.Errorf("aligned borrow: got %+v, want 1 array and 0 bytes", s)
	}
	if &f32Bytes(a.(*Array).buf.f32)[0] != &src.Data[0] {
		t.Errorf("aligned borrow copied the data, want an alias")
	}
	// Element 0 of a BF16 tensor starting at an odd address cannot be viewed: copy.
	buf := make([]byte, 5)
	odd := buf[1:]
	if uintptr(unsafe.Pointer(&odd[0]))%2 == 0 {
		odd = buf[:4]
	}
	bad := &tensor.Dense{DType: tensor.BF16, Shape: tensor.Shape{2}, Data: odd}
	c := b.Borrow(bad)
	if s := b.Stats(); s.LiveArrays != 2 || s.LiveBytes != 4 {
		t.Errorf("unaligned borrow: got %+v, want 2 arrays and 4 bytes (a copy)", s)
	}
	check(t, b, c, tensor.BF16, tensor.Shape{2}, 0, 0)
	// Ops on a borrowed array never write it.
	b.SliceUpdate(a, arr(b, tensor.F32, tensor.Shape{1}, 9), []int{0})
	if src.Float32s()[0] != 1 {
		t.Errorf("SliceUpdate wrote borrowed memory: got %v, want 1", src.Float32s()[0])
	}
	check(t, b, a, tensor.F32, tensor.Shape{2}, 1, 2)
}
