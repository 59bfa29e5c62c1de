package kernel

// amxDenseBF16 runs four panels of the AMX layout against up to sixteen
// rows of x in bfloat16 (dense_amx.go, dense_amx_amd64.s). It needs
// asmAMXBF16.
//
//go:noescape
func amxDenseBF16(a *amxDenseArgs)
