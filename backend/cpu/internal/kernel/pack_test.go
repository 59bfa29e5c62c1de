package kernel

import (
	"fmt"
	"testing"
)

func TestPackRoundTrip(t *testing.T) {
	for _, bits := range []int{2, 3, 4, 5, 6, 8} {
		for _, cols := range []int{32, 96, 256} {
			t.Run(fmt.Sprintf("b%d/%d", bits, cols), func(t *testing.T) {
				r := newRand(uint64(bits*1000 + cols))
				codes := make([]uint8, cols)
				for i := range codes {
					codes[i] = uint8(r.IntN(1 << bits))
				}
				codes[0], codes[cols-1] = uint8(1<<bits-1), uint8(1<<bits-1) // the extremes
				row := make([]uint32, WordsPerRow(cols, bits)+1)
				row[len(row)-1] = 0xdeadbeef
				PackRow(row, codes, cols, bits)
				if row[len(row)-1] != 0xdeadbeef {
					t.Fatalf("PackRow wrote past the row")
				}
				back := make([]uint8, cols)
				UnpackRow(back, row, cols, bits)
				for i := range codes {
					if back[i] != codes[i] {
						t.Fatalf("got code %d, want %d (index %d)", back[i], codes[i], i)
					}
				}
				// The fast group decoder agrees with the plain extraction.
				f := make([]float32, cols)
				decodeGroup(f, row, cols, bits)
				for i := range codes {
					if f[i] != float32(codes[i]) {
						t.Fatalf("decodeGroup: got %v, want %d (index %d)", f[i], codes[i], i)
					}
				}
			})
		}
	}
}

// TestPackLayout checks the bit layout by hand: element i at bit i*bits of
// the little-endian row, LSB first.
func TestPackLayout(t *testing.T) {
	codes := make([]uint8, 32)
	for i := range codes {
		codes[i] = uint8(i % 8)
	}
	cases := []struct {
		bits int
		want []uint32 // first words
	}{
		// 4 bits: codes 0..7 in nibbles 0..7 of word 0: 0x76543210.
		{4, []uint32{0x76543210}},
		// 8 bits: codes 0,1,2,3 in bytes 0..3: 0x03020100.
		{8, []uint32{0x03020100}},
		// 2 bits: codes 0,1,2,3,4&3=0,... (masked to 2 bits): per 4 codes 0b11100100 = 0xE4.
		{2, []uint32{0xE4E4E4E4}},
		// 3 bits: codes 0..7 fill 24 bits: Σ k<<3k = 0xFAC688; codes 8 (=0), 9 (=1), 10 (=2) at bits 24, 27, 30.
		{3, []uint32{0xFAC688 | 1<<27 | 2<<30}},
		// 6 bits: codes 0..4 at bits 0,6,..,24; code 5 = 0b000101 at bits 30..35 straddles: low 2 bits (01) are
		// bits 30..31, high 4 bits (0001) start word 1; then codes 6, 7, 8 (=0), 9 (=1), 10 (=2) at word-1 bits 4, 10, 16, 22, 28.
		{6, []uint32{1<<6 | 2<<12 | 3<<18 | 4<<24 | 1<<30, 5>>2 | 6<<4 | 7<<10 | 1<<22 | 2<<28}},
		// 5 bits: codes 0..5 at bits 0,5,..,25; code 6 = 0b00110 at bits 30..34: low 2 bits (10) are bits 30..31,
		// high 3 bits (001) start word 1; then 7, 8 (=0), 9 (=1), 10 (=2), 11 (=3), 12 (=4) at word-1 bits 3, 8, 13, 18, 23, 28.
		{5, []uint32{1<<5 | 2<<10 | 3<<15 | 4<<20 | 5<<25 | 2<<30, 6>>2 | 7<<3 | 1<<13 | 2<<18 | 3<<23 | 4<<28}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprintf("b%d", c.bits), func(t *testing.T) {
			row := make([]uint32, WordsPerRow(32, c.bits))
			PackRow(row, codes, 32, c.bits)
			for i, w := range c.want {
				if row[i] != w {
					t.Errorf("got word 0x%08x, want 0x%08x (bits %d, word %d)", row[i], w, c.bits, i)
				}
			}
		})
	}
}
