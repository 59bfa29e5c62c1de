package conformance

import (
	"github.com/mlxgo/mlxgo/models/minicpm5"
	"github.com/mlxgo/mlxgo/nn"
)

// cacheOptions are the KV cache options of a model case
// (conformance/oracle/kvcache.py): max_kv_size selects mlx_lm's
// RotatingKVCache; absent, the full cache.
func cacheOptions(c *Case) (nn.CacheOptions, error) {
	var o nn.CacheOptions
	if _, ok := c.Params["max_kv_size"]; ok {
		n, err := c.Int("max_kv_size")
		if err != nil {
			return o, err
		}
		o.MaxKVSize = n
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
