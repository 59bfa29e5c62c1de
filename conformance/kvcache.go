package conformance

import (
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
)

// cacheOptions are the KV cache options of a model case
// (conformance/oracle/kvcache.py): max_kv_size selects mlx_lm's
// RotatingKVCache; kv_bits (with kv_group_size and quantized_kv_start)
// generate_step's KV quantization; both absent, the full cache (storing
// float32 keys in the dtype WithKVDType gave c).
func cacheOptions(c *Case) (nn.CacheOptions, error) {
	o := nn.CacheOptions{KVDType: c.kvDType}
	if _, ok := c.Params["max_kv_size"]; ok {
		n, err := c.Int("max_kv_size")
		if err != nil {
			return o, err
		}
		o.MaxKVSize = n
	}
	if _, ok := c.Params["kv_bits"]; ok {
		for _, p := range []struct {
			key string
			v   *int
		}{{"kv_bits", &o.KVBits}, {"kv_group_size", &o.KVGroupSize}, {"quantized_kv_start", &o.QuantizedKVStart}} {
			n, err := c.Int(p.key)
			if err != nil {
				return o, err
			}
			*p.v = n
		}
	}
	return o, o.Check()
}

// cacheView is m with NewCache making the case's kind of cache.
func cacheView(m *minicpm5.Model, c *Case) (minicpm5.CacheView, error) {
	o, err := cacheOptions(c)
	if err != nil {
		return minicpm5.CacheView{}, err
	}
	return m.WithCache(o)
}
