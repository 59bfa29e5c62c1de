package conformance

import (
	"fmt"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/nn"
	"github.com/mlxgo/mlxgo/nn/turboquant"
	"github.com/mlxgo/mlxgo/tensor"
)

func init() { register("turboquant", runTurboQuant) }

// runTurboQuant runs a TurboQuant case (conformance/oracle/turboquant.py):
// q, k and v through two nn.TurboKVCaches encoding from the first token,
// one read eagerly and one deferred. The stored parts, the codes they
// unpack to and the windows they decode to are the codec's outputs (exact);
// the two attention outputs are held to the tolerance table.
func runTurboQuant(b backend.Backend, c *Case, a *Arrays) (map[string]*tensor.Dense, error) {
	kb, err := c.Int("k_bits")
	if err != nil {
		return nil, err
	}
	vb, err := c.Int("v_bits")
	if err != nil {
		return nil, err
	}
	scale, err := c.Float("scale")
	if err != nil {
		return nil, err
	}
	causal, err := c.Bool("causal")
	if err != nil {
		return nil, err
	}
	var mask backend.Mask = backend.NoMask{}
	if causal {
		mask = backend.CausalMask{}
	}
	in, err := inputs(b, a, "q", "k", "v")
	if err != nil {
		return nil, err
	}
	scheme := turboquant.Scheme{KBits: kb, VBits: vb}
	if err := scheme.Check(in[1].Shape()[3]); err != nil {
		return nil, fmt.Errorf("case %s: %w", c.Name, err)
	}
	attend := func(deferred bool) (*nn.TurboKVCache, backend.Array, error) {
		tc, err := nn.NewTurboKVCache(b, scheme, deferred, true)
		if err != nil {
			return nil, nil, err
		}
		return tc, tc.Attend(in[0], in[1], in[2], float32(scale), mask), nil
	}
	eager, oe, err := attend(false)
	if err != nil {
		return nil, err
	}
	defer eager.Release()
	deferred, od, err := attend(true)
	if err != nil {
		return nil, err
	}
	defer deferred.Release()
	out, err := host(b, map[string]backend.Array{"attn_eager": oe, "attn_deferred": od})
	if err != nil {
		return nil, err
	}
	parts, err := eager.HostParts()
	if err != nil {
		return nil, err
	}
	kp := parts[0].Clone()
	kp.DType = tensor.U8 // int8 codes of 8-bit keys, as the bytes the fixture stores
	out["k_packed"], out["k_scales"], out["k_zeros"], out["v_packed"], out["v_scales"] = kp, parts[1], parts[2], parts[3], parts[4]
	out["k_codes"] = unpackCodes(parts[0], kb, parts[0].DType)
	out["v_codes"] = unpackCodes(parts[3], vb, tensor.U8)
	win, err := eager.Window(true, true)
	if err != nil {
		return nil, err
	}
	out["k_window"] = tensor.FromFloat32(win.Shape, win.Keys)
	out["v_window"] = tensor.FromFloat32(win.Shape, win.Values)
	out["v_rotated"] = tensor.FromFloat32(win.Shape, win.VRotated)
	return out, nil
}

// unpackCodes unpacks every row of packed ([..., n·bits/8]) to one code per byte.
func unpackCodes(packed *tensor.Dense, bits int, dt tensor.DType) *tensor.Dense {
	s := packed.Shape
	w := s[len(s)-1]
	n := w * 8 / bits
	shape := append(tensor.Shape{}, s...)
	shape[len(s)-1] = n
	t := tensor.New(dt, shape)
	for r := range packed.Len() / w {
		turboquant.Unpack(packed.Data[r*w:(r+1)*w], bits, t.Data[r*n:(r+1)*n])
	}
	return t
}
