package backend

import (
	"testing"

	"github.com/mlxgo/mlxgo/tensor"
)

// TestPromoteTypesMatchesMLX checks every pair against MLX's type_rules
// table (mlx/dtype.cpp, without complex64), transcribed in MLX's order:
// bool, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16,
// float32, float64, bfloat16.
func TestPromoteTypesMatchesMLX(t *testing.T) {
	const (
		b   = tensor.Bool
		u8  = tensor.U8
		u16 = tensor.U16
		u32 = tensor.U32
		u64 = tensor.U64
		i8  = tensor.I8
		i16 = tensor.I16
		i32 = tensor.I32
		i64 = tensor.I64
		f16 = tensor.F16
		f32 = tensor.F32
		f64 = tensor.F64
		bf  = tensor.BF16
	)
	order := []tensor.DType{b, u8, u16, u32, u64, i8, i16, i32, i64, f16, f32, f64, bf}
	table := [][]tensor.DType{
		{b, u8, u16, u32, u64, i8, i16, i32, i64, f16, f32, f64, bf},      // bool
		{u8, u8, u16, u32, u64, i16, i16, i32, i64, f16, f32, f64, bf},    // uint8
		{u16, u16, u16, u32, u64, i32, i32, i32, i64, f16, f32, f64, bf},  // uint16
		{u32, u32, u32, u32, u64, i64, i64, i64, i64, f16, f32, f64, bf},  // uint32
		{u64, u64, u64, u64, u64, f32, f32, f32, f32, f16, f32, f64, bf},  // uint64
		{i8, i16, i32, i64, f32, i8, i16, i32, i64, f16, f32, f64, bf},    // int8
		{i16, i16, i32, i64, f32, i16, i16, i32, i64, f16, f32, f64, bf},  // int16
		{i32, i32, i32, i64, f32, i32, i32, i32, i64, f16, f32, f64, bf},  // int32
		{i64, i64, i64, i64, f32, i64, i64, i64, i64, f16, f32, f64, bf},  // int64
		{f16, f16, f16, f16, f16, f16, f16, f16, f16, f16, f32, f64, f32}, // float16
		{f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f32, f64, f32}, // float32
		{f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64, f64}, // float64
		{bf, bf, bf, bf, bf, bf, bf, bf, bf, f32, f32, f64, bf},           // bfloat16
	}
	for i, a := range order {
		for j, c := range order {
			t.Run(a.String()+"+"+c.String(), func(t *testing.T) {
				if got, want := PromoteTypes(a, c), table[i][j]; got != want {
					t.Errorf("got %v, want %v (MLX type_rules[%d][%d])", got, want, i, j)
				}
			})
		}
	}
}
