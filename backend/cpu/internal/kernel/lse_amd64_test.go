//go:build amd64

package kernel

import (
	"fmt"
	"math"
	"testing"
)

// TestLogSumExpRowVector holds LogSumExpRow with its AVX-512 maximum and
// sum to the portable loops bit for bit: rows of lengths around the vector
// width, random values around −12 (logits), rows with NaNs, infinities and
// signed zeros at the start, in the vector body and in the tail, and every
// bfloat16 pattern in rows of 4096.
func TestLogSumExpRowVector(t *testing.T) {
	if simdMax == nil || simdExpSum == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; LogSumExpRow runs its portable loops only")
	}
	portable := func(v []float32) float32 {
		mx, es := simdMax, simdExpSum
		simdMax, simdExpSum = nil, nil
		defer func() { simdMax, simdExpSum = mx, es }()
		return LogSumExpRow(v)
	}
	r := newRand(9)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	negz := float32(math.Copysign(0, -1))
	var rows [][]float32
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 48, 100, 513, 1000, 49152} {
		rows = append(rows, randVec(r, n, 3, Identity))
	}
	for _, n := range []int{1, 20, 40} {
		for _, at := range []int{0, n / 2, n - 1} {
			for _, sp := range []float32{nan, inf, -inf, negz} {
				v := make([]float32, n)
				for i := range v {
					v[i] = negz
				}
				if sp != negz {
					copy(v, randVec(r, n, 3, Identity))
				}
				v[at] = sp
				rows = append(rows, v)
			}
		}
	}
	// A NaN beside an infinite maximum (or in a row of −Inf) must win.
	for _, pair := range [][2]int{{3, 20}, {20, 3}, {33, 35}} {
		for _, fill := range []float32{1, -inf} {
			v := make([]float32, 48)
			for i := range v {
				v[i] = fill
			}
			v[pair[0]], v[pair[1]] = nan, inf
			if fill == -inf {
				v[pair[1]] = -inf
			}
			rows = append(rows, v)
		}
	}
	pats := sdpaExpInputs()[:1<<16]
	for i := 0; i < len(pats); i += 4096 {
		rows = append(rows, pats[i:i+4096])
	}
	for i, v := range rows {
		t.Run(fmt.Sprintf("row%d/len%d", i, len(v)), func(t *testing.T) {
			got, want := LogSumExpRow(v), portable(v)
			if math.Float32bits(got) != math.Float32bits(want) && !(got != got && want != want) {
				t.Fatalf("vector %v (%#08x), portable %v (%#08x)", got, math.Float32bits(got), want, math.Float32bits(want))
			}
		})
	}
}

// TestLogSumExpRows holds LogSumExpRows (four rows' sums at a time) to
// LogSumExpRow row by row, bit for bit: batches of one to nine rows of
// lengths around the vector width, some rows holding a NaN, ±Inf or only
// −Inf in their vector part or their tail; and that four rows do go
// through the four-row kernel (a row's sum wrong there would show).
func TestLogSumExpRows(t *testing.T) {
	if simdExpSum4 == nil {
		t.Skip("SKIPPED: this CPU lacks AVX-512; LogSumExpRows runs LogSumExpRow row by row")
	}
	r := newRand(11)
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	for _, n := range []int{0, 1, 15, 16, 17, 33, 100, 513, 49152} {
		for rows := 1; rows <= 9; rows++ {
			v := randVec(r, rows*n, 3, Identity)
			for i := range rows {
				if n == 0 {
					break
				}
				switch i % 5 {
				case 1:
					v[i*n+(i*7)%n] = nan
				case 2:
					v[i*n+n-1] = inf
				case 3:
					for j := range n {
						v[i*n+j] = -inf
					}
				}
			}
			got := make([]float32, rows)
			LogSumExpRows(got, v, n)
			for i := range rows {
				if w := LogSumExpRow(v[i*n : (i+1)*n]); math.Float32bits(got[i]) != math.Float32bits(w) {
					t.Errorf("n %d, %d rows, row %d: got %v, want %v", n, rows, i, got[i], w)
				}
			}
		}
	}
	// The kernel itself against vecExpSum, row by row.
	v := randVec(r, 4*160, 3, Identity)
	m := [4]float32{1, 2, -1, 0.5}
	var s [4]float32
	vecExpSum4(&v[0], &v[160], &v[320], &v[480], &m[0], 160, &s[0])
	for i := range 4 {
		if w := vecExpSum(&v[i*160], m[i], 160); math.Float32bits(s[i]) != math.Float32bits(w) {
			t.Errorf("vecExpSum4 row %d: %v, vecExpSum %v", i, s[i], w)
		}
	}
}
