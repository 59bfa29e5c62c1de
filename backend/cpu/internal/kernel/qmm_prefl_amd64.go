package kernel

//go:generate go run qmm_prefl_gen.go -o qmm_prefl_amd64.s

// qpreflB4HF32 computes, for the sixteen weight rows of a packed 4-bit
// panel in groups of 64 (two groups a block of sixteen words) with float32
// scales and biases, the vector kernels' one-row result against x (the
// bits of qmv_amd64.s), one lane per row (qmm_prefl_gen.go, AVX-512F).
//
//go:noescape
func qpreflB4HF32(a *preflArgs)

// qpreflB4HBF16 is qpreflB4HF32 with bfloat16 scales and biases.
//
//go:noescape
func qpreflB4HBF16(a *preflArgs)

// qpreflB4HF16 is qpreflB4HF32 with float16 scales and biases.
//
//go:noescape
func qpreflB4HF16(a *preflArgs)

// qpreflB4WF32 is qpreflB4HF32 for groups of a block or more (block b in
// group b>>sh).
//
//go:noescape
func qpreflB4WF32(a *preflArgs)

// qpreflB4WBF16 is qpreflB4WF32 with bfloat16 scales and biases.
//
//go:noescape
func qpreflB4WBF16(a *preflArgs)

// qpreflB4WF16 is qpreflB4WF32 with float16 scales and biases.
//
//go:noescape
func qpreflB4WF16(a *preflArgs)

// qpreflB8HF32 is qpreflB4HF32 for 8-bit codes in groups of 32.
//
//go:noescape
func qpreflB8HF32(a *preflArgs)

// qpreflB8HBF16 is qpreflB8HF32 with bfloat16 scales and biases.
//
//go:noescape
func qpreflB8HBF16(a *preflArgs)

// qpreflB8HF16 is qpreflB8HF32 with float16 scales and biases.
//
//go:noescape
func qpreflB8HF16(a *preflArgs)

// qpreflB8WF32 is qpreflB4WF32 for 8-bit codes (groups of 64 and 128).
//
//go:noescape
func qpreflB8WF32(a *preflArgs)

// qpreflB8WBF16 is qpreflB8WF32 with bfloat16 scales and biases.
//
//go:noescape
func qpreflB8WBF16(a *preflArgs)

// qpreflB8WF16 is qpreflB8WF32 with float16 scales and biases.
//
//go:noescape
func qpreflB8WF16(a *preflArgs)

// preflKernel returns the lane-order kernel for p's bits, layout and scale
// dtype.
func preflKernel(p *packedW) func(*preflArgs) {
	half := preflHalf(p.gs, p.bits)
	k := [2][2][3]func(*preflArgs){
		{{qpreflB4WF32, qpreflB4WF16, qpreflB4WBF16}, {qpreflB4HF32, qpreflB4HF16, qpreflB4HBF16}},
		{{qpreflB8WF32, qpreflB8WF16, qpreflB8WBF16}, {qpreflB8HF32, qpreflB8HF16, qpreflB8HBF16}},
	}
	bi, hi, di := 0, 0, 0
	if p.bits == 8 {
		bi = 1
	}
	if half {
		hi = 1
	}
	switch {
	case p.sb16 == nil:
	case p.sdt == 1:
		di = 1
	default:
		di = 2
	}
	return k[bi][hi][di]
}
