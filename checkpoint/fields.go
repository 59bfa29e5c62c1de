package checkpoint

import "fmt"

// fields reads typed values out of one decoded JSON object and words every
// error as "<source>: <prefix><field>: ...".
type fields struct {
	src    string
	prefix string
	obj    map[string]any
}

func (f fields) errf(name, format string, args ...any) error {
	return fmt.Errorf("%s: %s%s: "+format, append([]any{f.src, f.prefix, name}, args...)...)
}

// get returns the value of name, treating an explicit null like a missing key.
func (f fields) get(name string) (any, bool) {
	v, ok := f.obj[name]
	if !ok || v == nil {
		return nil, false
	}
	return v, true
}

// missingRequired is the error of a required field that is missing or null.
func (f fields) missingRequired(name string) error {
	return f.errf(name, "missing (a required field of mlx_lm's llama ModelArgs)")
}

func (f fields) reqInt(name string) (int, error) {
	i, ok, err := f.optInt(name, 0)
	if err == nil && !ok {
		err = f.missingRequired(name)
	}
	return i, err
}

// optInt returns def when name is missing or null.
func (f fields) optInt(name string, def int) (int, bool, error) {
	v, ok := f.get(name)
	if !ok {
		return def, false, nil
	}
	i, ok := asInt(v)
	if !ok {
		return 0, true, f.errf(name, "want an integer, got %s", kind(v))
	}
	return i, true, nil
}

func (f fields) reqFloat(name string) (float64, error) {
	x, ok, err := f.optFloat(name, 0)
	if err == nil && !ok {
		err = f.missingRequired(name)
	}
	return x, err
}

// optFloat returns def when name is missing or null.
func (f fields) optFloat(name string, def float64) (float64, bool, error) {
	v, ok := f.get(name)
	if !ok {
		return def, false, nil
	}
	x, ok := asFloat(v)
	if !ok {
		return 0, true, f.errf(name, "want a number, got %s", kind(v))
	}
	return x, true, nil
}

// optBool returns def when name is missing. An explicit null is false: mlx_lm
// passes None through and tests its truth value.
func (f fields) optBool(name string, def bool) (bool, error) {
	v, ok := f.obj[name]
	if !ok {
		return def, nil
	}
	if v == nil {
		return false, nil
	}
	b, ok := v.(bool)
	if !ok {
		return false, f.errf(name, "want true or false, got %s", kind(v))
	}
	return b, nil
}

func (f fields) optString(name string) (string, bool, error) {
	v, ok := f.get(name)
	if !ok {
		return "", false, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", true, f.errf(name, "want a string, got %s", kind(v))
	}
	return s, true, nil
}

// intList reads an integer or a list of integers (eos_token_id's two forms).
func (f fields) intList(name string) ([]int, error) {
	v, ok := f.get(name)
	if !ok {
		return nil, nil
	}
	if i, ok := asInt(v); ok {
		return []int{i}, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, f.errf(name, "want an integer or a list of integers, got %s", kind(v))
	}
	out := make([]int, len(list))
	for k, e := range list {
		i, ok := asInt(e)
		if !ok {
			return nil, f.errf(name, "element %d: want an integer, got %s", k, kind(e))
		}
		out[k] = i
	}
	return out, nil
}

// floatList reads a list of numbers; a single number stands for n copies of
// itself (SuScaledRoPE broadcasts a scalar factor).
func (f fields) floatList(name string, n int) ([]float64, error) {
	v, ok := f.get(name)
	if !ok {
		return nil, f.errf(name, "missing")
	}
	if x, ok := asFloat(v); ok {
		out := make([]float64, n)
		for i := range out {
			out[i] = x
		}
		return out, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, f.errf(name, "want a list of numbers, got %s", kind(v))
	}
	if len(list) != n && len(list) != 1 {
		return nil, f.errf(name, "got %d values, want head_dim/2 = %d", len(list), n)
	}
	out := make([]float64, n)
	for k, e := range list {
		x, ok := asFloat(e)
		if !ok {
			return nil, f.errf(name, "element %d: want a number, got %s", k, kind(e))
		}
		out[k] = x
	}
	if len(list) == 1 {
		for i := range out {
			out[i] = out[0]
		}
	}
	return out, nil
}
