package convert

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzConvert: any GGUF file either fails to convert with an error, leaving no output
// directory, or converts into a model that loads (Convert checks it); nothing panics.
func FuzzConvert(f *testing.F) {
	seed, err := os.ReadFile(tinyGGUF(f, nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	missing, err := os.ReadFile(tinyGGUF(f, dropTensor("blk.0.attn_q.weight")))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(missing)
	f.Add(seed[:len(seed)/3])
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		src := filepath.Join(dir, "in.gguf")
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out")
		if _, err := Convert(src, out, Options{}); err != nil {
			if _, serr := os.Stat(out); serr == nil {
				t.Fatalf("output left behind after %v", err)
			}
			entries, _ := os.ReadDir(dir)
			if len(entries) != 1 {
				t.Fatalf("left behind: %v (after %v)", entries, err)
			}
		}
	})
}
