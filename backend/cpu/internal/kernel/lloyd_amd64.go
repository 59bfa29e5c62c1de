//go:build amd64

package kernel

import "golang.org/x/sys/cpu"

// lloydRows is lloydRowsGo on a validated call (lloyd_amd64.s; AVX-512
// F/BW and VBMI).
//
//go:noescape
func lloydRows(a *lloydArgs)

// lloydAsm reports whether lloydRows can run: AVX-512 (asmF32) with VBMI.
var lloydAsm = cpu.X86.HasAVX512F && cpu.X86.HasAVX512BW && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VBMI

// keyRows8 is keyRows8Go on a validated call (lloyd_amd64.s; AVX-512 F/BW).
//
//go:noescape
func keyRows8(a *keyArgs)
