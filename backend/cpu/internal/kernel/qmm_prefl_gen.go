//go:build ignore

// qmm_prefl_gen writes qmm_prefl_amd64.s, the reference precision's one-row
// kernels on packed panels for the shapes whose one-row order is the
// vector kernels' lane order (qmv_amd64.s: 4-bit groups of 64 and 128,
// 8-bit groups of 32, 64 and 128); qmm_prefl.go declares and documents
// them: go generate (the //go:generate line of qmm_prefl.go runs go run
// qmm_prefl_gen.go -o qmm_prefl_amd64.s); without -o it writes to standard
// output (TestGenerated compares that output with the committed file).
//
// In the lane order a row's words are taken sixteen at a time (a block),
// word l of a block into lane l: per word the products of its codes with
// x, even codes chained in one sum and odd ones in another (the first of
// each a multiply, the rest fused multiply-adds), the two sums added, and
// that times the group's scale added to lane l's total by an FMA; per lane
// the bias terms b·Σx of the groups l, l+16, ... chained by FMAs; total +
// bias; then the sixteen lanes added in hsum's order (halves of 256 bits,
// of 128, then (l0+l1)+(l2+l3)). A packed panel holds word W of its
// sixteen rows side by side (a row per lane), so here register A_l holds
// lane l of sixteen rows, one row per lane: every step above is the same
// operation on the same operands, with x broadcast, and hsum's additions
// are additions of whole registers. Floating-point addition and
// multiplication commute, so the bits are the vector kernels'.
package main

import (
	"flag"
	"fmt"
	"math"
	"os"
	"strings"
)

var b strings.Builder

func p(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }

// The arguments (preflArgs in qmm_prefl.go; offsets fixed here).
const (
	aW    = 0  // the panel's codes
	aS    = 8  // its scales, [group][16]
	aBoff = 16 // the biases' offset from the scales, in bytes (0: symmetric)
	aX    = 24 // x, float32
	aXs   = 32 // the group sums of x
	aOut  = 40 // sixteen outputs
	aNblk = 48 // blocks of sixteen words per row
	aNg   = 56 // groups per row
	aSh   = 64 // whole layout: block b reads group b>>sh
	aPf   = 72 // prefetch distance in bytes
	aBf   = 80 // bias factor: 1, or the symmetric factor (b = bf·s)
)

// Registers. AX: the arguments. SI: the current block's words; DI: its x;
// R8: the scales; DX: the block index; CX: blocks left; R13: the prefetch
// distance; R9-R12, R14: scratch.
//
// Z0-Z15: the sixteen lane totals A_l; Z16: a word; Z17, Z18: the even and
// odd sums; Z19: a code vector; Z21, Z22: the scale vectors; Z23-Z25:
// constants (8-bit: the byte mask and two VPSHUFB controls; 4-bit: the
// nibble floats 0..15); Z26, Z27: the bias chain; Z28: bf.

func loadScale(dt, m, z string) {
	switch dt {
	case "f32":
		p("\tVMOVUPS %s, %s", m, z)
	case "bf16":
		p("\tVPMOVZXWD %s, %s", m, z)
		p("\tVPSLLD $16, %s, %s", z, z)
	default:
		p("\tVCVTPH2PS %s, %s", m, z)
	}
}

// word writes the steps of word l of the block into A_l with scale sreg.
func word(bits, l int, sreg string) {
	p("\tPREFETCHT1 %d(SI)(R13*1)", 64*l)
	p("\tVMOVDQU32 %d(SI), Z16", 64*l)
	if bits == 8 {
		// byte q of each lane: masked, VPSHUFB, VPSHUFB, shifted
		xo := 16 * l
		p("\tVPANDD Z23, Z16, Z19")
		p("\tVCVTUDQ2PS Z19, Z19")
		p("\tVMULPS.BCST %d(DI), Z19, Z17", xo)
		p("\tVPSHUFB Z24, Z16, Z19")
		p("\tVCVTUDQ2PS Z19, Z19")
		p("\tVMULPS.BCST %d(DI), Z19, Z18", xo+4)
		p("\tVPSHUFB Z25, Z16, Z19")
		p("\tVCVTUDQ2PS Z19, Z19")
		p("\tVFMADD231PS.BCST %d(DI), Z19, Z17", xo+8)
		p("\tVPSRLD $24, Z16, Z19")
		p("\tVCVTUDQ2PS Z19, Z19")
		p("\tVFMADD231PS.BCST %d(DI), Z19, Z18", xo+12)
	} else {
		// nibble q: the table lookup of the word shifted by 4q (VPERMPS
		// reads an index's low four bits); the last converted
		xo := 32 * l
		for q := range 8 {
			sum := "Z17"
			if q%2 == 1 {
				sum = "Z18"
			}
			switch q {
			case 0:
				p("\tVPERMPS Z23, Z16, Z19")
			case 7:
				p("\tVPSRLD $28, Z16, Z19")
				p("\tVCVTDQ2PS Z19, Z19")
			default:
				p("\tVPSRLD $%d, Z16, Z19", 4*q)
				p("\tVPERMPS Z23, Z19, Z19")
			}
			if q < 2 {
				p("\tVMULPS.BCST %d(DI), Z19, %s", xo+4*q, sum)
			} else {
				p("\tVFMADD231PS.BCST %d(DI), Z19, %s", xo+4*q, sum)
			}
		}
	}
	p("\tVADDPS Z18, Z17, Z17")
	p("\tVFMADD231PS %s, Z17, Z%d", sreg, l)
}

// kernel writes qpreflB<bits><H|W><DT>: one packed panel of sixteen weight
// rows against one row of x, the sixteen outputs to out. H (half): two
// groups per block, words 0-7 of a block in the first; W (whole): block b
// in group b>>sh.
func kernel(bits int, half bool, dt string) {
	lay := "W"
	if half {
		lay = "H"
	}
	name := fmt.Sprintf("qpreflB%d%s%s", bits, lay, map[string]string{"f32": "F32", "bf16": "BF16", "f16": "F16"}[dt])
	ss := 2 // bytes of a scale
	if dt == "f32" {
		ss = 4
	}
	xblk := 16 * (32 / bits) * 4 // bytes of x a block
	p("// func %s(a *preflArgs)", name)
	p("TEXT ·%s(SB), NOSPLIT, $0-8", name)
	p("\tMOVQ a+0(FP), AX")
	p("\tMOVQ %d(AX), SI", aW)
	p("\tMOVQ %d(AX), R8", aS)
	p("\tMOVQ %d(AX), DI", aX)
	p("\tMOVQ %d(AX), CX", aNblk)
	p("\tMOVQ %d(AX), R13", aPf)
	p("\tMOVQ %d(AX), R11", aSh)
	p("\tXORQ DX, DX")
	if bits == 8 {
		p("\tMOVL $0xff, R9")
		p("\tVPBROADCASTD R9, Z23")
		p("\tVMOVDQU32 preflShb1<>(SB), Z24")
		p("\tVMOVDQU32 preflShb2<>(SB), Z25")
	} else {
		p("\tVMOVUPS preflNib<>(SB), Z23")
	}
	for l := range 16 {
		p("\tVPXORD Z%d, Z%d, Z%d", l, l, l)
	}
	p("%s_block:", name)
	if half {
		// groups 2b and 2b+1
		p("\tMOVQ DX, R9")
		p("\tSHLQ $%d, R9", log2(32*ss))
		p("\tADDQ R8, R9")
		loadScale(dt, "(R9)", "Z21")
		loadScale(dt, fmt.Sprintf("%d(R9)", 16*ss), "Z22")
	} else {
		p("\tSHRXQ R11, DX, R9")
		p("\tSHLQ $%d, R9", log2(16*ss))
		p("\tADDQ R8, R9")
		loadScale(dt, "(R9)", "Z21")
	}
	for l := range 16 {
		s := "Z21"
		if half && l >= 8 {
			s = "Z22"
		}
		word(bits, l, s)
	}
	p("\tADDQ $1024, SI")
	p("\tADDQ $%d, DI", xblk)
	p("\tINCQ DX")
	p("\tDECQ CX")
	p("\tJNZ %s_block", name)
	// The bias chains: lane l over the groups l, l+16, ... (b·bf)·Σx by
	// FMA, then A_l += chain.
	p("\tMOVQ %d(AX), R10", aBoff)
	p("\tADDQ R8, R10")
	p("\tMOVQ %d(AX), R12", aXs)
	p("\tVBROADCASTSS %d(AX), Z28", aBf)
	for l := range 16 {
		p("\tMOVQ %d(AX), R9", aNg)
		p("\tSUBQ $%d, R9", l)
		p("\tJLE %s_nobias%d", name, l)
		p("\tADDQ $15, R9")
		p("\tSHRQ $4, R9")
		p("\tLEAQ %d(R10), R14", 16*ss*l)
		p("\tLEAQ %d(R12), CX", 4*l)
		p("\tVPXORD Z26, Z26, Z26")
		p("%s_bias%d:", name, l)
		loadScale(dt, "(R14)", "Z27")
		p("\tVMULPS Z28, Z27, Z27")
		p("\tVFMADD231PS.BCST (CX), Z27, Z26")
		p("\tADDQ $%d, R14", 16*16*ss)
		p("\tADDQ $64, CX")
		p("\tDECQ R9")
		p("\tJNZ %s_bias%d", name, l)
		p("\tVADDPS Z26, Z%d, Z%d", l, l)
		p("%s_nobias%d:", name, l)
	}
	// hsum's order across the lanes
	for i := range 8 {
		p("\tVADDPS Z%d, Z%d, Z%d", i+8, i, i)
	}
	for j := range 4 {
		p("\tVADDPS Z%d, Z%d, Z%d", j+4, j, j)
	}
	p("\tVADDPS Z1, Z0, Z0")
	p("\tVADDPS Z3, Z2, Z2")
	p("\tVADDPS Z2, Z0, Z0")
	p("\tMOVQ %d(AX), R9", aOut)
	p("\tVMOVUPS Z0, (R9)")
	p("\tVZEROUPPER")
	p("\tRET")
	p("")
}

func log2(n int) int {
	s := 0
	for 1<<s < n {
		s++
	}
	return s
}

func header() {
	p("// Code generated by qmm_prefl_gen.go; DO NOT EDIT.")
	p("")
	p("//go:build amd64")
	p("")
	p("#include \"textflag.h\"")
	p("")
	p("// The reference precision's one-row kernels on packed panels in the")
	p("// vector kernels' lane order (qmm_prefl.go documents them,")
	p("// qmm_prefl_gen.go the steps).")
	p("")
	for l := range 16 {
		p("DATA preflNib<>+%d(SB)/4, $0x%08x", 4*l, math.Float32bits(float32(l)))
	}
	p("GLOBL preflNib<>(SB), RODATA|NOPTR, $64")
	// VPSHUFB controls: byte 1 (2) of each dword into its low byte, the
	// others zero.
	for i, q := range []int{1, 2} {
		name := fmt.Sprintf("preflShb%d", i+1)
		for d := range 16 {
			p("DATA %s<>+%d(SB)/4, $0x%08x", name, 4*d, 0x80808000|uint32(4*(d%4)+q))
		}
		p("GLOBL %s<>(SB), RODATA|NOPTR, $64", name)
	}
	p("")
}

func main() {
	out := flag.String("o", "", "output file (default standard output)")
	flag.Parse()
	header()
	for _, bits := range []int{4, 8} {
		for _, half := range []bool{true, false} {
			for _, dt := range []string{"f32", "bf16", "f16"} {
				kernel(bits, half, dt)
			}
		}
	}
	if *out == "" {
		os.Stdout.WriteString(b.String())
		return
	}
	if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
