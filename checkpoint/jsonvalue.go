package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// decodeObject parses a JSON object the way mlx_lm's load_config does: numbers
// stay exact (json.Number) and transformers' tagged non-finite floats
// ({"__float__": "Infinity"}) become float64 values.
func decodeObject(data []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON object")
	}
	obj, ok := untagFloats(v).(map[string]any)
	if !ok {
		return nil, fmt.Errorf("want a JSON object, got %s", kind(v))
	}
	return obj, nil
}

func untagFloats(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 1 {
			if s, ok := x["__float__"].(string); ok {
				switch s {
				case "Infinity":
					return math.Inf(1)
				case "-Infinity":
					return math.Inf(-1)
				case "NaN":
					return math.NaN()
				}
			}
		}
		for k, e := range x {
			x[k] = untagFloats(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = untagFloats(e)
		}
		return x
	}
	return v
}

// kind names a decoded JSON value's type for error messages, with the value
// itself when it is short.
func kind(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case bool:
		return strconv.FormatBool(x)
	case json.Number:
		return "number " + x.String()
	case float64:
		return fmt.Sprintf("number %v", x)
	case string:
		if len(x) > 40 {
			x = x[:40] + "..."
		}
		return strconv.Quote(x)
	case []any:
		return fmt.Sprintf("a list of %d", len(x))
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// asInt converts a JSON number holding an integral value to int.
func asInt(v any) (int, bool) {
	switch x := v.(type) {
	case json.Number:
		if i, err := strconv.ParseInt(x.String(), 10, 64); err == nil {
			return int(i), true
		}
		f, err := x.Float64()
		if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
			return 0, false
		}
		return int(f), true
	}
	return 0, false
}

// asFloat converts a JSON number (or a decoded tagged float) to float64.
func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case float64:
		return x, true
	}
	return 0, false
}

// truthy reports Python's truth value of a decoded JSON value.
func truthy(v any) bool {
	switch x := v.(type) {
	case nil:
		return false
	case bool:
		return x
	case json.Number:
		f, err := x.Float64()
		return err != nil || f != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case []any:
		return len(x) > 0
	case map[string]any:
		return len(x) > 0
	}
	return true
}
