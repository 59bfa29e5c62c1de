package tensor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// shardDir writes two shards: a,b in shard 1 and c in shard 2, and the index
// text when non-empty.
func shardDir(t *testing.T, index string) string {
	t.Helper()
	dir := t.TempDir()
	one := func(v float32) *Dense { return FromFloat32(Shape{1}, []float32{v}) }
	s1 := filepath.Join(dir, "model-00001-of-00002.safetensors")
	s2 := filepath.Join(dir, "model-00002-of-00002.safetensors")
	if err := WriteSafetensors(s1, []string{"b", "a"}, []*Dense{one(2), one(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteSafetensors(s2, []string{"c"}, []*Dense{one(3)}, nil); err != nil {
		t.Fatal(err)
	}
	if index != "" {
		if err := os.WriteFile(filepath.Join(dir, IndexFileName), []byte(index), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const (
	shard1 = "model-00001-of-00002.safetensors"
	shard2 = "model-00002-of-00002.safetensors"
)

func TestSafetensorsDir(t *testing.T) {
	for _, index := range []string{"", `{"metadata":{"total_size":12},"weight_map":{"a":"` + shard1 + `","b":"` + shard1 + `","c":"` + shard2 + `"}}`} {
		t.Run("index="+map[bool]string{true: "none", false: "agrees"}[index == ""], func(t *testing.T) {
			dir := shardDir(t, index)
			s, err := OpenSafetensorsDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := strings.Join(s.Names(), ","); got != "a,b,c" {
				t.Errorf("Names: got %s, want a,b,c", got)
			}
			if got := s.Files(); len(got) != 2 || got[0] != filepath.Join(dir, shard1) || got[1] != filepath.Join(dir, shard2) {
				t.Errorf("Files: got %v", got)
			}
			for i, name := range []string{"a", "b", "c"} {
				info, file, ok := s.Info(name)
				wantFile := filepath.Join(dir, map[bool]string{true: shard2, false: shard1}[name == "c"])
				if !ok || file != wantFile || info.Name != name {
					t.Errorf("Info(%s): got %+v %s %v, want file %s", name, info, file, ok, wantFile)
				}
				x, err := s.Tensor(name)
				if err != nil || x.ToFloat32()[0] != float32(i+1) {
					t.Errorf("Tensor(%s): got %v, %v, want %d", name, x, err, i+1)
				}
			}
			if _, err := s.Tensor("zz"); err == nil || !strings.Contains(err.Error(), `"zz"`) || !strings.Contains(err.Error(), dir) {
				t.Errorf("missing: got %v, want an error naming \"zz\" and %s", err, dir)
			}
		})
	}
}

func TestSafetensorsDirDisagrees(t *testing.T) {
	cases := []struct {
		name  string
		index string
		want  []string
	}{
		{"wrong-file", `{"weight_map":{"a":"` + shard2 + `","b":"` + shard1 + `","c":"` + shard2 + `"}}`,
			[]string{`"a" is mapped to ` + shard2 + " but is in", shard1}},
		{"absent-tensor", `{"weight_map":{"a":"` + shard1 + `","b":"` + shard1 + `","c":"` + shard2 + `","d":"` + shard2 + `"}}`,
			[]string{`"d" is mapped to ` + shard2 + " but no shard holds it"}},
		{"unmapped-tensor", `{"weight_map":{"a":"` + shard1 + `","b":"` + shard1 + `"}}`,
			[]string{`"c" in`, shard2, "missing from the weight_map"}},
		{"missing-shard", `{"weight_map":{"a":"` + shard1 + `","b":"` + shard1 + `","c":"model-00003-of-00003.safetensors"}}`,
			[]string{`"c" is mapped to model-00003-of-00003.safetensors`}},
		{"no-weight-map", `{"metadata":{}}`, []string{`no "weight_map"`}},
		{"bad-json", `{"weight_map":`, []string{"invalid JSON"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := shardDir(t, c.index)
			s, err := OpenSafetensorsDir(dir)
			if err == nil {
				s.Close()
				t.Fatalf("got no error, want one containing %q", c.want)
			}
			for _, w := range append([]string{filepath.Join(dir, IndexFileName)}, c.want...) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestSafetensorsDirErrors(t *testing.T) {
	t.Run("duplicate-across-shards", func(t *testing.T) {
		dir := shardDir(t, "")
		extra := filepath.Join(dir, "model-extra.safetensors")
		if err := WriteSafetensors(extra, []string{"c"}, []*Dense{New(F32, Shape{1})}, nil); err != nil {
			t.Fatal(err)
		}
		_, err := OpenSafetensorsDir(dir)
		for _, w := range []string{`"c"`, filepath.Join(dir, shard2), extra} {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("got %v, want it to contain %q", err, w)
			}
		}
	})
	t.Run("empty-dir", func(t *testing.T) {
		dir := t.TempDir()
		if _, err := OpenSafetensorsDir(dir); err == nil || !strings.Contains(err.Error(), dir) {
			t.Errorf("got %v, want an error naming %s", err, dir)
		}
	})
	t.Run("bad-shard", func(t *testing.T) {
		dir := shardDir(t, "")
		bad := filepath.Join(dir, "model-00003-of-00003.safetensors")
		if err := os.WriteFile(bad, []byte{1}, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := OpenSafetensorsDir(dir); err == nil || !strings.Contains(err.Error(), bad) {
			t.Errorf("got %v, want an error naming %s", err, bad)
		}
	})
}
