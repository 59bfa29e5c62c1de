package kernel

import "unsafe"

// The reference precision on packed panels for the shapes whose one-row
// order is the vector kernels' lane order (qmv_amd64.s: 4-bit groups of
// 64 and 128, 8-bit groups of 32, 64 and 128). On the original layout
// those kernels read four rows' codes, then their scales and biases from
// two other arrays; through the int8 GEMM's panels (the same packed form
// the fast precision reads) a worker reads one stream of codes, and the
// kernels of qmm_prefl_gen.go (qpreflB*) run the lane order with a row
// per lane: the same bits. Four or more rows of x unpack the panels a
// slice at a time (qmmTRefUnpacked), as prefill is bound by arithmetic.

// preflArgs are the arguments of the qpreflB kernels (offsets fixed in
// qmm_prefl_gen.go): one panel's codes and scales (the biases boff bytes
// on; the scales again when the matrix is symmetric, then bf is its
// factor, else 1), x and its group sums, the sixteen outputs, the blocks
// of sixteen words and the groups of a row, the group shift of the whole
// layout, and the prefetch distance.
type preflArgs struct {
	w, s   unsafe.Pointer // 0, 8
	boff   uintptr        // 16
	x, xs  unsafe.Pointer // 24, 32
	out    unsafe.Pointer // 40
	nblk   int            // 48
	ng, sh int            // 56, 64
	pf     uintptr        // 72
	bf     float32        // 80
	_      float32
}

// preflPF is how far ahead of the current word the qpreflB kernels
// prefetch into L2 (PREFETCHT1), one line a word: past the panel into the
// next, which follows it in memory. On the Intel Xeon of 2026-12-06
// (BenchmarkRefPackedStream's qwen-0.5b layers with preflPF edited: 24
// layers of 8-bit group-32 matrices, 460 MB, two threads) the packed
// panels took 22.0-23.5 ms with PREFETCHT0 1 KB ahead (the distance of
// qprefB4, tuned on Zen 4), 15.9-16.7 at 4 KB, 15.0-16.3 at 16-32 KB,
// 14.9-15.9 at 64 KB, against 16.5-18.6 ms on the original layout; the
// synthetic Qwen2.5-0.5B's reference decode 43.2-43.6 -> 50.2-52.7 tok/s
// and MiniCPM5-1B's 31.8-32.7 -> 35.8-37.8 (mlxgo generate, 128 tokens,
// alternating runs). Not measured on AMD.
var preflPF uintptr = 32 << 10

// laneOrder reports whether the reference one-row order of a matrix of k
// columns in groups of gs of bits bits is the vector kernels' lane order
// (vecKernel's shapes), which the qpreflB kernels compute on packed
// panels.
func laneOrder(k, gs, bits int) bool { return vecKernel(k, gs, bits, false) == 'a' }

// preflHalf reports whether a block of sixteen words spans two groups.
func preflHalf(gs, bits int) bool { return gs == 16*(32/bits)/2 }

// preflShift is the whole layout's group shift: block b is in group b>>sh.
func preflShift(gs, bits int) int {
	sh := 0
	for 16*(32/bits)<<sh < gs {
		sh++
	}
	return sh
}

// preflJob is one matrix's qpreflB calls against one row of x (its group
// sums xs), a panel a call.
type preflJob struct {
	dst   []float32
	p     *packedW
	x, xs []float32
	kern  func(*preflArgs)
	bf    float32
	round Rounder
	rk    byte
	np    int
}

func newPreflJob(dst []float32, p *packedW, x, xs []float32, round Rounder) preflJob {
	j := preflJob{dst: dst, p: p, x: x, xs: xs, kern: preflKernel(p), bf: 1, round: round, rk: roundKind(round), np: (p.n + q8C - 1) / q8C}
	if p.symk != 0 {
		j.bf = p.symk
	}
	return j
}

// run computes panels lo..hi-1.
func (j *preflJob) run(lo, hi int) {
	p, n := j.p, j.p.n
	var spare [q8C]float32 // a partial panel's outputs
	a := preflArgs{x: ptr(j.x), xs: ptr(j.xs), nblk: p.k / (16 * (32 / p.bits)), ng: p.k / p.gs, sh: preflShift(p.gs, p.bits), pf: preflPF, bf: j.bf}
	for c := lo; c < hi; c++ {
		var b unsafe.Pointer
		a.w, a.s, b = p.panel(c)
		a.boff = uintptr(b) - uintptr(a.s)
		r := c * q8C
		a.out = unsafe.Pointer(&spare[0])
		if r+q8C <= n {
			a.out = unsafe.Pointer(&j.dst[r])
		}
		j.kern(&a)
		if r+q8C > n {
			copy(j.dst[r:n], spare[:])
		}
	}
	roundSlice(j.dst[lo*q8C:min(n, hi*q8C)], j.round, j.rk)
}

// qmvRefLanes runs the qpreflB kernels over p's panels against one row of
// x, split across the workers (refSharedLanes for one matrix).
func qmvRefLanes(dst, x []float32, p *packedW, round Rounder) {
	refSharedLanes(x, []SharedMat{{Dst: dst, N: p.n}}, []*packedW{p}, 1, p.k, p.gs, round)
}

// refSharedLanes is refSharedRun for the lane-order shapes: per row of x
// its group sums once, and every matrix's panels in one pass of the
// workers.
func refSharedLanes(x []float32, mats []SharedMat, packed []*packedW, m, k, gs int, round Rounder) {
	s := scratchPool.Get().(*qmmScratch)
	defer scratchPool.Put(s)
	ng := k / gs
	s.xs = grow(s.xs, m*ng)
	groupSumsFlat(s.xs, x, m*ng, gs)
	jobs := make([]preflJob, len(mats))
	panels := make([]int, len(mats))
	for r := range m {
		for i, a := range mats {
			jobs[i] = newPreflJob(a.Dst[r*a.N:(r+1)*a.N], packed[i], x[r*k:(r+1)*k], s.xs[r*ng:(r+1)*ng], round)
			panels[i] = jobs[i].np
		}
		parallelJobs(panels, max(1, 4096/k), func(i, lo, hi int) { jobs[i].run(lo, hi) })
	}
	prefCalls.Add(int64(len(mats)))
}
