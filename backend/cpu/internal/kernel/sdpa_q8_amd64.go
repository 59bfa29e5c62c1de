//go:build amd64

package kernel

import "unsafe"

// The kernels of sdpa_q8_amd64.s (sdpa_q8.go describes the arithmetic).

// sdpaQ8KT transposes the 8-bit codes of 16 keys (d bytes each, d a
// multiple of 64; key i at src + i·stride bytes) into dwords: dst[t4·16 +
// i] is bytes 4·t4 ... 4·t4+3 of key i, each dword XORed with xor (0, or
// 0x80808080 to turn signed codes into unsigned ones).
//
//go:noescape
func sdpaQ8KT(dst *int32, src unsafe.Pointer, stride uintptr, d, xor int)

// sdpaQ8GT writes dst[g·n + j] = src[j·gpr + g] for j < n (a multiple of
// 16) and g < gpr: the per-group scales of n keys, key-major to group-major.
//
//go:noescape
func sdpaQ8GT(dst, src *float32, n, gpr int)

// sdpaQ8Scores is q8ScoresGo (the same bits).
//
//go:noescape
func sdpaQ8Scores(a *q8ScoreArgs)

// sdpaQPV8 is qpv8Go (the same bits).
//
//go:noescape
func sdpaQPV8(a *qpvArgs)
