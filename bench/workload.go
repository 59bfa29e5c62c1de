package bench

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"github.com/mlxgo/mlxgo/checkpoint"
	"github.com/mlxgo/mlxgo/gguf"
	"github.com/mlxgo/mlxgo/tensor"
)

// PromptIDs returns n seeded token ids in [3, vocab_size) of the checkpoint
// in dir (ids 0-2 are the GGUF twin's special tokens), the same for every
// engine of a run.
func PromptIDs(dir string, n int, seed uint64) ([]int32, error) {
	cfg, err := checkpoint.LoadConfig(dir)
	if err != nil {
		return nil, err
	}
	if cfg.VocabSize <= 3 {
		return nil, fmt.Errorf("bench: %s: vocab_size %d is too small for prompts", dir, cfg.VocabSize)
	}
	r := rand.New(rand.NewPCG(seed, 0x6d6c78676f))
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(3 + r.IntN(cfg.VocabSize-3))
	}
	return ids, nil
}

// CheckpointWeightBytes opens the MLX checkpoint in dir and returns the
// bytes one decode step reads (every block's linears and norms, the final
// norm, the head, and one row of the embedding) and the size of its
// safetensors files.
func CheckpointWeightBytes(dir string) (perToken, files int64, err error) {
	ck, err := checkpoint.Open(dir)
	if err != nil {
		return 0, 0, err
	}
	defer ck.Close()
	size := func(ts ...*tensor.Dense) (n int64) {
		for _, t := range ts {
			if t != nil {
				n += int64(len(t.Data))
			}
		}
		return n
	}
	lin := func(l *checkpoint.Linear) int64 {
		if l == nil {
			return 0
		}
		return size(l.Weight, l.Scales, l.Biases, l.Bias)
	}
	for _, l := range ck.Layers {
		perToken += lin(l.Q) + lin(l.K) + lin(l.V) + lin(l.O) + lin(l.Gate) + lin(l.Up) + lin(l.Down) + size(l.InputNorm, l.PostAttentionNorm)
	}
	perToken += size(ck.Norm)
	e := ck.Embed
	row := size(e.Weight, e.Scales, e.Biases) / int64(e.Vocab)
	if ck.Head != nil {
		perToken += lin(ck.Head) + row
	} else {
		perToken += size(e.Weight, e.Scales, e.Biases) // the tied head reads it all
	}
	matches, err := filepath.Glob(filepath.Join(dir, "model*.safetensors"))
	if err != nil {
		return 0, 0, err
	}
	for _, m := range matches {
		if st, err := os.Stat(m); err == nil {
			files += st.Size()
		}
	}
	return perToken, files, nil
}

// GGUFWeightBytes returns the bytes one llama.cpp decode step reads of the
// GGUF file at path: every tensor but token_embd, plus one of its rows; with
// no output.weight (a tied head, which llama.cpp computes from token_embd)
// all of token_embd.
func GGUFWeightBytes(path string) (int64, error) {
	f, err := gguf.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	tied := true
	for _, t := range f.Tensors {
		if t.Name == "output.weight" {
			tied = false
		}
	}
	var n int64
	for _, t := range f.Tensors {
		if !tied && t.Name == "token_embd.weight" && len(t.Dims) == 2 && t.Dims[1] > 0 {
			n += int64(t.Size / t.Dims[1])
			continue
		}
		n += int64(t.Size)
	}
	return n, nil
}

// ReadBandwidth measures memory read bandwidth in bytes per second: threads
// goroutines each sum their share of a buffer of size bytes (choose it well
// above the last-level cache), passes times; the best pass counts. Passes
// alternate two readers, the prefetching sumStream (from the first pass)
// and the plain loop of sumWords, so the figure is what the better of them
// reaches on this CPU.
func ReadBandwidth(threads, size, passes int) float64 {
	threads = max(threads, 1)
	buf := make([]uint64, size/8)
	for i := range buf {
		buf[i] = uint64(i)
	}
	share := len(buf) / threads
	best := 0.0
	var sink uint64
	var mu sync.Mutex
	for pass := range passes {
		sum := sumStream
		if pass%2 == 1 {
			sum = sumWords
		}
		var wg sync.WaitGroup
		start := time.Now()
		for t := range threads {
			wg.Add(1)
			go func(part []uint64) {
				defer wg.Done()
				s := sum(part)
				mu.Lock()
				sink += s
				mu.Unlock()
			}(buf[t*share : (t+1)*share])
		}
		wg.Wait()
		if bw := float64(share*threads*8) / time.Since(start).Seconds(); bw > best {
			best = bw
		}
	}
	runtime.KeepAlive(sink)
	return best
}

// sumWords adds the words with eight independent accumulators, so the loop
// is bound by loads, not by the add chain.
func sumWords(p []uint64) uint64 {
	var s0, s1, s2, s3, s4, s5, s6, s7 uint64
	for len(p) >= 8 {
		s0 += p[0]
		s1 += p[1]
		s2 += p[2]
		s3 += p[3]
		s4 += p[4]
		s5 += p[5]
		s6 += p[6]
		s7 += p[7]
		p = p[8:]
	}
	for _, v := range p {
		s0 += v
	}
	return s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7
}
