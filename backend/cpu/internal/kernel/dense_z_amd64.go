package kernel

//go:generate go run dense_z_gen.go -o dense_z_amd64.s

// The AVX-512 form of the reference dense kernels (dense_z_amd64.s,
// written by dense_z_gen.go): the sixteen accumulators of a row of x in one
// ZMM register, up to eight rows of x per call, x by embedded broadcast;
// the in-order loop's bits (denseRef1..4's operations per lane).

// denseRefZ1 adds, for l < a.n in order, x[l]·panel[l][c] to the sixteen
// accumulators a.out[c], x the row at a.a and panel[l] the sixteen float32
// at a.p + 64·l: a float32 multiply, then a float32 add, per lane and step
// (denseRef1's operations, so its bits).
//
//go:noescape
func denseRefZ1(a *denseArgs)

// denseRefZ2 is denseRefZ1 for 2 rows of x (a.astr bytes apart) and 2 rows
// of accumulators (64 bytes apart).
//
//go:noescape
func denseRefZ2(a *denseArgs)

// denseRefZ3 is denseRefZ2 for 3 rows.
//
//go:noescape
func denseRefZ3(a *denseArgs)

// denseRefZ4 is denseRefZ2 for 4 rows.
//
//go:noescape
func denseRefZ4(a *denseArgs)

// denseRefZ5 is denseRefZ2 for 5 rows.
//
//go:noescape
func denseRefZ5(a *denseArgs)

// denseRefZ6 is denseRefZ2 for 6 rows.
//
//go:noescape
func denseRefZ6(a *denseArgs)

// denseRefZ7 is denseRefZ2 for 7 rows.
//
//go:noescape
func denseRefZ7(a *denseArgs)

// denseRefZ8 is denseRefZ2 for 8 rows.
//
//go:noescape
func denseRefZ8(a *denseArgs)

// denseZOn switches the AVX-512 kernels on where the CPU has AVX-512
// (tests compare with them off).
var denseZOn = true

// denseRefStep is how many rows of x denseRefPanel runs per kernel call:
// eight with the AVX-512 kernels, else four.
func denseRefStep() int {
	if denseZOn && asmF32 {
		return 8
	}
	return 4
}

// denseRefRowsZ runs the reference kernel for n (1 to 8) rows of x: the
// AVX-512 ones where denseRefStep is eight, else denseRefRows (n <= 4).
func denseRefRowsZ(a *denseArgs, n int) {
	if denseRefStep() == 4 {
		denseRefRows(a, n)
		return
	}
	switch n {
	case 1:
		denseRefZ1(a)
	case 2:
		denseRefZ2(a)
	case 3:
		denseRefZ3(a)
	case 4:
		denseRefZ4(a)
	case 5:
		denseRefZ5(a)
	case 6:
		denseRefZ6(a)
	case 7:
		denseRefZ7(a)
	default:
		denseRefZ8(a)
	}
}
