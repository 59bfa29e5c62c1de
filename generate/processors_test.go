package generate

import (
	"fmt"
	"strconv"
	"testing"
)

// The reference rows come from mlx_lm's make_logits_processors at test time.
const processorScript = `
import json, numpy as np, mlx.core as mx
from mlx_lm.sample_utils import make_logits_processors

def bits(a):
    if a.dtype in (mx.bfloat16, mx.float16):
        return a.view(mx.uint16).reshape(-1).tolist()
    return a.view(mx.uint32).reshape(-1).tolist()

rng = np.random.default_rng(11)
ctx = [3, 7, 7, 1, 40, 3, 3, 9, 12, 7, 0, 49, 22, 22, 5, 3, 18, 30, 7, 7, 2, 44, 3, 15, 15]
out = []
for dt in [mx.bfloat16, mx.float16, mx.float32]:
    logits = mx.array(rng.standard_normal(50).astype(np.float32) * 4).astype(dt)[None]
    for cfg in [dict(repetition_penalty=1.3), dict(repetition_penalty=1.1, repetition_context_size=5),
                dict(presence_penalty=0.55), dict(frequency_penalty=0.7), dict(frequency_penalty=0.3, frequency_context_size=40),
                dict(logit_bias={3: 2.5, 7: -1.3, 48: 0.1}),
                dict(logit_bias={0: 1.0}, repetition_penalty=1.2, presence_penalty=0.25, frequency_penalty=0.15)]:
        procs = make_logits_processors(**cfg)
        x = mx.array(logits)  # the processors assign into their argument
        for p in procs:
            x = p(mx.array(ctx), x)
        c = {k: v for k, v in cfg.items() if k != "logit_bias"}
        bias = {str(k): v for k, v in cfg.get("logit_bias", {}).items()}
        out.append({"dtype": str(dt).split(".")[-1], "cfg": c, "bias": bias, "ctx": ctx, "in": bits(logits), "out": bits(x)})
print(json.dumps(out))
`

func TestProcessorsMatchMLX(t *testing.T) {
	var cases []struct {
		DType   string
		Cfg     map[string]float64
		Bias    map[string]float32
		Ctx     []int32
		In, Out []uint32
	}
	oracle(t, processorScript, &cases)
	for _, c := range cases {
		t.Run(fmt.Sprintf("%s/%v/bias=%v", c.DType, c.Cfg, c.Bias), func(t *testing.T) {
			o := ProcessorOptions{
				RepetitionPenalty:     c.Cfg["repetition_penalty"],
				RepetitionContextSize: int(c.Cfg["repetition_context_size"]),
				PresencePenalty:       c.Cfg["presence_penalty"],
				PresenceContextSize:   int(c.Cfg["presence_context_size"]),
				FrequencyPenalty:      c.Cfg["frequency_penalty"],
				FrequencyContextSize:  int(c.Cfg["frequency_context_size"]),
			}
			if len(c.Bias) > 0 {
				o.LogitBias = map[int32]float32{}
				for k, v := range c.Bias {
					id, err := strconv.Atoi(k)
					if err != nil {
						t.Fatal(err)
					}
					o.LogitBias[int32(id)] = v
				}
			}
			x, dt := decodeBits(t, c.DType, c.In)
			want, _ := decodeBits(t, c.DType, c.Out)
			if err := o.Process(c.Ctx, x, dt); err != nil {
				t.Fatal(err)
			}
			sameBits(t, "processed", x, want)
		})
	}
}

func TestProcessorErrors(t *testing.T) {
	row := make([]float32, 10)
	for name, tc := range map[string]struct {
		o   ProcessorOptions
		ctx []int32
	}{
		"negative-penalty": {ProcessorOptions{RepetitionPenalty: -1}, []int32{1}},
		"negative-window":  {ProcessorOptions{PresencePenalty: 1, PresenceContextSize: -2}, []int32{1}},
		"context-id":       {ProcessorOptions{RepetitionPenalty: 1.2}, []int32{1, 10}},
		"bias-id":          {ProcessorOptions{LogitBias: map[int32]float32{-1: 1}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			if err := tc.o.Process(tc.ctx, row, 0); err == nil {
				t.Fatal("got nil error for an invalid dtype")
			}
			if err := tc.o.Process(tc.ctx, row, 12); err == nil {
				t.Fatalf("got nil error, want one for %+v", tc.o)
			}
		})
	}
}
