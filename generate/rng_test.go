package generate

import (
	"fmt"
	"math"
	"strconv"
	"testing"
)

// The MLX values below come from mx.random at test time (oracle_test.go).
const rngScript = `
import json, mlx.core as mx
out = []
for seed in [0, 1, 42, 2**32 + 5, 2**63 + 12345]:
    k = mx.random.key(seed)
    a, b = mx.random.split(k)
    case = {"seed": str(seed), "key": k.tolist(), "split": [a.tolist(), b.tolist()], "bits": {}, "uniform": {}}
    for n in range(1, 8):
        case["bits"][str(2 * n)] = mx.random.split(k, num=n).reshape(-1).tolist()
        case["uniform"][str(n)] = [float(v).hex() for v in mx.random.uniform(shape=(n,), key=k).tolist()]
    mx.random.seed(seed)
    case["draws"] = [float(mx.random.uniform().item()).hex() for _ in range(4)]
    out.append(case)
print(json.dumps(out))
`

type rngCase struct {
	Seed    string
	Key     [2]uint32
	Split   [2][2]uint32
	Bits    map[string][]uint32
	Uniform map[string][]string
	Draws   []string
}

func parseHex(t *testing.T, s string) float32 {
	t.Helper()
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		t.Fatalf("bad hex float %q: %v", s, err)
	}
	return float32(f)
}

func TestRNGMatchesMLX(t *testing.T) {
	var cases []rngCase
	oracle(t, rngScript, &cases)
	for _, c := range cases {
		t.Run("seed="+c.Seed, func(t *testing.T) {
			var seed uint64
			fmt.Sscan(c.Seed, &seed)
			k := Key(seed)
			if k != c.Key {
				t.Fatalf("Key: got %v, want %v", k, c.Key)
			}
			a, b := Split(k)
			if a != c.Split[0] || b != c.Split[1] {
				t.Errorf("Split: got %v %v, want %v %v", a, b, c.Split[0], c.Split[1])
			}
			for n := 1; n < 8; n++ {
				// MLX's Python API reaches bits only through split(key, num),
				// 2·num words; odd counts are covered by Uniform below.
				if want, ok := c.Bits[fmt.Sprint(2*n)]; ok {
					got := Bits(k, 2*n)
					for i := range want {
						if got[i] != want[i] {
							t.Errorf("Bits(n=%d): got %#x, want %#x (index %d)", 2*n, got[i], want[i], i)
						}
					}
				}
				u := Uniform(k, n)
				for i, s := range c.Uniform[fmt.Sprint(n)] {
					if w := parseHex(t, s); math.Float32bits(u[i]) != math.Float32bits(w) {
						t.Errorf("Uniform(n=%d): got %v, want %v (index %d)", n, u[i], w, i)
					}
				}
			}
			r := NewRNG(seed)
			for i, s := range c.Draws {
				if got, want := r.Uniform(), parseHex(t, s); got != want {
					t.Errorf("seeded draw: got %v, want %v (draw %d)", got, want, i)
				}
			}
		})
	}
}
