package train

// NumpyRNG is numpy's legacy global generator (np.random.seed,
// np.random.permutation): MT19937 seeded by init_genrand, and the
// Fisher-Yates shuffle of RandomState.shuffle drawing bounded integers by
// masked rejection (random_interval). mlx_lm.lora seeds it with --seed
// and iterate_batches draws each epoch's batch order from it.
type NumpyRNG struct {
	mt  [624]uint32
	idx int
}

// NewNumpyRNG is np.random.seed(seed).
func NewNumpyRNG(seed uint32) *NumpyRNG {
	r := &NumpyRNG{idx: 624}
	r.mt[0] = seed
	for i := 1; i < 624; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
	return r
}

// Uint32 is the next 32-bit output of MT19937.
func (r *NumpyRNG) Uint32() uint32 {
	if r.idx >= 624 {
		for i := 0; i < 624; i++ {
			y := r.mt[i]&0x80000000 | r.mt[(i+1)%624]&0x7fffffff
			v := r.mt[(i+397)%624] ^ y>>1
			if y&1 != 0 {
				v ^= 0x9908b0df
			}
			r.mt[i] = v
		}
		r.idx = 0
	}
	y := r.mt[r.idx]
	r.idx++
	y ^= y >> 11
	y ^= y << 7 & 0x9d2c5680
	y ^= y << 15 & 0xefc60000
	y ^= y >> 18
	return y
}

// interval is numpy's random_interval(max) for max < 2³²: a draw in
// [0, max] by masking to the smallest covering power of two and
// rejecting values above max.
func (r *NumpyRNG) interval(max uint32) uint32 {
	if max == 0 {
		return 0
	}
	mask := max
	for s := 1; s < 32; s <<= 1 {
		mask |= mask >> s
	}
	for {
		if v := r.Uint32() & mask; v <= max {
			return v
		}
	}
}

// Permutation is np.random.permutation(n): arange(n) shuffled from the
// last position down, each swapped with a draw in [0, i]. n must be
// below 2³².
func (r *NumpyRNG) Permutation(n int) []int {
	p := make([]int, n)
	for i := range p {
		p[i] = i
	}
	for i := n - 1; i >= 1; i-- {
		j := int(r.interval(uint32(i)))
		p[i], p[j] = p[j], p[i]
	}
	return p
}
