package generate

import "math"

// RNG is MLX's random key state (mx.random.state): a threefry2x32 key. Each
// draw first splits the state into a new state and a key to use, as MLX's
// KeySequence.next does for random calls made without an explicit key, so a
// sequence of draws from NewRNG(seed) reproduces mx.random.seed(seed)
// followed by the same random calls in Python.
type RNG struct {
	key [2]uint32
}

// NewRNG returns the state mx.random.seed(seed) sets: Key(seed).
func NewRNG(seed uint64) *RNG { return &RNG{key: Key(seed)} }

// State returns the current key.
func (r *RNG) State() [2]uint32 { return r.key }

// Next splits the state (mlx random::split), keeps the first half as the new
// state and returns the second half, the key one random call consumes.
func (r *RNG) Next() [2]uint32 {
	var use [2]uint32
	r.key, use = Split(r.key)
	return use
}

// Uniform draws one float32 in [0, 1) as mx.random.uniform() does with no
// key: it consumes one key from the state.
func (r *RNG) Uniform() float32 { return Uniform(r.Next(), 1)[0] }

// Key is mlx random::key(seed): the high and low 32-bit halves of seed.
func Key(seed uint64) [2]uint32 { return [2]uint32{uint32(seed >> 32), uint32(seed)} }

// Split is mlx random::split(key): Bits(key, 4) read as a [2, 2] array, whose
// row 0 is the first result and row 1 the second.
func Split(key [2]uint32) (a, b [2]uint32) {
	w := Bits(key, 4)
	return [2]uint32{w[0], w[1]}, [2]uint32{w[2], w[3]}
}

// Bits is mlx random::bits for one key and n 32-bit words (RandomBits on the
// CPU; the Metal kernel lays words out the same way). With h = n/2 and odd =
// n%2, counter (j, j+h+odd) gives words j and j+h+odd for j < h, and when n is
// odd word h is the first half of the hash of counter (h, 0).
func Bits(key [2]uint32, n int) []uint32 {
	out := make([]uint32, n)
	h, odd := n/2, n%2
	for j := 0; j < h; j++ {
		out[j], out[j+h+odd] = Threefry2x32(key, [2]uint32{uint32(j), uint32(j + h + odd)})
	}
	if odd == 1 {
		out[h], _ = Threefry2x32(key, [2]uint32{uint32(h), 0})
	}
	return out
}

// Threefry2x32 is the 20-round Threefry-2x32 hash of counter under key, as
// mlx/backend/cpu/threefry.cpp computes it (uint32 wrap-around arithmetic):
// key schedule ks = (k0, k1, k0^k1^0x1BD11BDA); x = counter + (ks0, ks1);
// five rounds of four mix steps (x0 += x1; x1 = rotl(x1, r) ^ x0) with
// rotations (13, 15, 26, 6) on even rounds and (17, 29, 16, 24) on odd ones,
// each round followed by x0 += ks[(i+1)%3], x1 += ks[(i+2)%3] + i + 1.
func Threefry2x32(key, counter [2]uint32) (uint32, uint32) {
	rot := [2][4]uint32{{13, 15, 26, 6}, {17, 29, 16, 24}}
	ks := [3]uint32{key[0], key[1], key[0] ^ key[1] ^ 0x1BD11BDA}
	x0, x1 := counter[0]+ks[0], counter[1]+ks[1]
	for i := uint32(0); i < 5; i++ {
		for _, r := range rot[i%2] {
			x0 += x1
			x1 = x1<<r | x1>>(32-r)
			x1 ^= x0
		}
		x0 += ks[(i+1)%3]
		x1 += ks[(i+2)%3] + i + 1
	}
	return x0, x1
}

// uniformMax is the largest float32 below 1, std::nextafter(1.0f, 0.0f).
var uniformMax = math.Nextafter32(1, 0)

// Uniform is mlx random::uniform(0, 1, [n], float32, key): each word w of
// Bits(key, n) becomes min(float32(w) / 4294967296, nextafter(1, 0)). The
// uint32 → float32 conversion rounds to nearest even (so float32(2³²−1) is
// 2³², MLX's divisor), and the division is in float32.
func Uniform(key [2]uint32, n int) []float32 {
	w := Bits(key, n)
	out := make([]float32, n)
	const maxval = float32(math.MaxUint32)
	for i, v := range w {
		out[i] = min(float32(v)/maxval, uniformMax)
	}
	return out
}
