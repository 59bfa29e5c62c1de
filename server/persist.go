package server

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/promptcache"
)

// ErrOtherModel is the error of a prompt cache file in Config.PromptCacheDir
// made for another model than the one served (its metadata "model" or
// its caches' shape).
var ErrOtherModel = errors.New("the prompt cache file was made for another model")

// cacheDir saves prefix cache entries as prompt cache files (mlx_lm's
// format, package promptcache) in one directory: one file per entry, named
// by a hash of its tokens, with the metadata "model" (the served model's
// id) and "tokens" (the token ids the caches hold, comma-separated). The
// files there take at most limit bytes: the least recently written go
// first.
type cacheDir struct {
	path  string
	model string
	shape promptcache.Shape
	vocab int
	limit int64
	b     backend.Backend
	log   func(format string, a ...any)
}

// name is the file of an entry holding tokens.
func (d *cacheDir) name(tokens []int32) string {
	h := sha256.New()
	for _, t := range tokens {
		binary.Write(h, binary.LittleEndian, t)
	}
	return filepath.Join(d.path, fmt.Sprintf("%x.safetensors", h.Sum(nil)[:12]))
}

// save writes e's file (through a temporary file renamed into place), then
// prunes the directory to its limit. A failure is logged: the entry is
// only lost.
func (d *cacheDir) save(e *prefixEntry) {
	var f *promptcache.File
	err := d.b.Do(func() (err error) {
		defer backend.Recover(&err)
		f, err = promptcache.FromCaches(d.b, e.cache, map[string]string{"model": d.model, "tokens": joinTokens(e.tokens)})
		return err
	})
	name := d.name(e.tokens)
	if err == nil {
		tmp := name + ".tmp"
		if err = f.Write(tmp); err == nil {
			err = os.Rename(tmp, name)
		}
		if err != nil {
			os.Remove(tmp)
		}
	}
	if err != nil {
		d.log("prompt cache: saving %d tokens to %s: %v", len(e.tokens), name, err)
		return
	}
	e.saved = true
	d.prune()
}

// remove deletes the file of an entry holding tokens, if any.
func (d *cacheDir) remove(tokens []int32) {
	if err := os.Remove(d.name(tokens)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.log("prompt cache: %v", err)
	}
}

// files lists the directory's prompt cache files, least recently written
// first, with their sizes.
func (d *cacheDir) files() ([]os.FileInfo, error) {
	ents, err := os.ReadDir(d.path)
	if err != nil {
		return nil, err
	}
	var out []os.FileInfo
	for _, de := range ents {
		if de.IsDir() || !strings.HasSuffix(de.Name(), ".safetensors") {
			continue
		}
		fi, err := de.Info()
		if err != nil {
			return nil, err
		}
		out = append(out, fi)
	}
	slices.SortStableFunc(out, func(a, b os.FileInfo) int { return a.ModTime().Compare(b.ModTime()) })
	return out, nil
}

// prune deletes the least recently written files until the rest fit the
// limit.
func (d *cacheDir) prune() {
	fis, err := d.files()
	if err != nil {
		d.log("prompt cache: %v", err)
		return
	}
	var total int64
	for _, fi := range fis {
		total += fi.Size()
	}
	for _, fi := range fis {
		if total <= d.limit {
			break
		}
		if err := os.Remove(filepath.Join(d.path, fi.Name())); err != nil {
			d.log("prompt cache: %v", err)
			continue
		}
		total -= fi.Size()
	}
}

// load reads the latest prompt cache files of the directory into p, as
// many as the limit holds (the older ones are left to prune), the most
// recently written becoming the most recently used. A file that cannot be
// read, or that was made for another model (ErrOtherModel), is an error
// naming it, and nothing is loaded.
func (d *cacheDir) load(p *prefixCache) error {
	fis, err := d.files()
	if err != nil {
		return err
	}
	var entries []*prefixEntry // latest first
	fail := func(err error) error {
		for _, e := range entries {
			p.free(e)
		}
		return err
	}
	var total int64
	for _, fi := range slices.Backward(fis) {
		if total += fi.Size(); total > d.limit {
			break
		}
		path := filepath.Join(d.path, fi.Name())
		e, err := d.read(path)
		if err != nil {
			return fail(fmt.Errorf("prompt cache file %s: %w", path, err))
		}
		e.saved = true
		entries = append(entries, e)
	}
	for _, e := range slices.Backward(entries) {
		p.insert(e)
	}
	return nil
}

// read reads one file as an entry, checked against the served model.
func (d *cacheDir) read(path string) (*prefixEntry, error) {
	f, err := promptcache.Read(path)
	if err != nil {
		return nil, err
	}
	if m := f.Metadata["model"]; m != d.model {
		return nil, fmt.Errorf("%w: its metadata names model %q, the server serves %q", ErrOtherModel, m, d.model)
	}
	if err := f.Check(d.shape); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOtherModel, err)
	}
	for i, l := range f.Layers {
		if l.Class != promptcache.KVCacheClass && l.Class != "" {
			return nil, fmt.Errorf("layer %d is a %s; the prefix cache holds full caches (KVCache) only", i, l.Class)
		}
	}
	tokens, err := parseTokens(f.Metadata["tokens"], d.vocab)
	if err != nil {
		return nil, fmt.Errorf("metadata \"tokens\": %w", err)
	}
	if len(tokens) != f.Tokens() || len(tokens) == 0 {
		return nil, fmt.Errorf("metadata \"tokens\" lists %d tokens, the caches hold %d", len(tokens), f.Tokens())
	}
	var caches []nn.KVCache
	err = d.b.Do(func() (err error) {
		defer backend.Recover(&err)
		caches, err = f.Caches(d.b)
		return err
	})
	if err != nil {
		return nil, err
	}
	return newEntry(tokens, caches), nil
}

func joinTokens(ids []int32) string {
	var sb strings.Builder
	for i, t := range ids {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(strconv.Itoa(int(t)))
	}
	return sb.String()
}

// parseTokens reads comma-separated token ids, each in [0, vocab).
func parseTokens(s string, vocab int) ([]int32, error) {
	if s == "" {
		return nil, errors.New("missing (the file was not written by mlxgo serve)")
	}
	var out []int32
	for i, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 || v >= vocab {
			return nil, fmt.Errorf("token %d is %q, want an id in [0, %d)", i, f, vocab)
		}
		out = append(out, int32(v))
	}
	return out, nil
}
