package kernel

import (
	"os"
	"os/exec"
	"testing"
)

// TestGenerated: each generated assembly file is what its generator writes
// (go generate runs them; sdpa_gen.go's polynomial constants come from
// mlxmath.ExpPoly).
func TestGenerated(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("SKIPPED: no go command on PATH to run the generators")
	}
	for _, c := range []struct{ gen, out string }{
		{"sdpa_gen.go", "sdpa_amd64.s"},
		{"sdpa_avx2_gen.go", "sdpa_avx2_amd64.s"},
		{"qmv_avx2_gen.go", "qmv_avx2_amd64.s"},
		{"qmm_avx2_gen.go", "qmm_avx2_amd64.s"},
		{"qmm_zf32_gen.go", "qmm_zf32_amd64.s"},
		{"vec_avx2_gen.go", "vec_avx2_amd64.s"},
		{"dense_gen.go", "dense_amd64.s"},
		{"qmm_pref_gen.go", "qmm_pref_amd64.s"},
		{"qmm_prefl_gen.go", "qmm_prefl_amd64.s"},
	} {
		t.Run(c.gen, func(t *testing.T) {
			fresh, err := exec.Command("go", "run", c.gen).Output()
			if err != nil {
				t.Fatalf("go run %s: %v", c.gen, err)
			}
			have, err := os.ReadFile(c.out)
			if err != nil {
				t.Fatal(err)
			}
			if string(fresh) != string(have) {
				t.Errorf("%s differs from the output of %s: run go generate", c.out, c.gen)
			}
		})
	}
}
