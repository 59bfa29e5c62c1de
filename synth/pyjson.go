package synth

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// obj is a JSON object with its keys in order: Python dicts keep insertion
// order and mlx_lm's files depend on it.
type obj []field

type field struct {
	k string
	v any // string, int, int64, float64, bool or obj
}

// pyJSON renders v as Python's json.dump(v, f, indent=4) does: four-space
// indents, ", "-free item separators with newlines, ": " after keys, floats
// in Python's repr, and no trailing newline.
func pyJSON(v any) string {
	var b strings.Builder
	writePy(&b, v, 0)
	return b.String()
}

func writePy(b *strings.Builder, v any, depth int) {
	switch x := v.(type) {
	case obj:
		if len(x) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{\n")
		for i, f := range x {
			b.WriteString(strings.Repeat("    ", depth+1))
			k, _ := json.Marshal(f.k)
			b.Write(k)
			b.WriteString(": ")
			writePy(b, f.v, depth+1)
			if i+1 < len(x) {
				b.WriteString(",")
			}
			b.WriteString("\n")
		}
		b.WriteString(strings.Repeat("    ", depth) + "}")
	case string:
		s, _ := json.Marshal(x)
		b.Write(s)
	case int:
		b.WriteString(strconv.Itoa(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case float64:
		b.WriteString(pyFloat(x))
	default:
		panic(fmt.Sprintf("synth: pyJSON of %T", v))
	}
}

// pyFloat is Python's repr of a finite float: the shortest round-tripping
// digits, positional with a ".0" when the decimal exponent is in [-4, 16),
// else scientific with a two-digit exponent at least ("1e-05").
func pyFloat(f float64) string {
	if f == 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		if f == 0 {
			if math.Signbit(f) {
				return "-0.0"
			}
			return "0.0"
		}
		panic("synth: pyFloat of a non-finite value")
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // d.ddde±XX
	mant, expS, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expS)
	if exp >= -4 && exp < 16 {
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.Contains(s, ".") {
			s += ".0"
		}
		return s
	}
	sign := "+"
	if exp < 0 {
		sign, exp = "-", -exp
	}
	return fmt.Sprintf("%se%s%02d", mant, sign, exp)
}
