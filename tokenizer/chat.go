package tokenizer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
)

// Message is one chat message.
type Message struct {
	Role    string
	Content string
}

// ChatOptions are the arguments of ApplyChatTemplate besides the messages.
type ChatOptions struct {
	// AddGenerationPrompt appends the header of the assistant's turn.
	AddGenerationPrompt bool
	// Tools, when not nil, is passed to the template as `tools`. A Go map keeps no key order,
	// so tojson writes map keys sorted.
	Tools []map[string]any
	// Extra holds further template variables, e.g. {"enable_thinking": false}.
	Extra map[string]any
	// Limits bound the rendering (zero fields take the defaults).
	Limits TemplateLimits
}

// TemplateError is an error raised by the template itself through raise_exception.
type TemplateError struct{ Message string }

func (e *TemplateError) Error() string { return "chat template: " + e.Message }

// HasChatTemplate reports whether tokenizer_config.json has a chat_template.
func (t *Tokenizer) HasChatTemplate() bool { return t.config.ChatTemplate != "" }

// ApplyChatTemplate renders tokenizer_config.json's chat_template for messages, as
// transformers' apply_chat_template(messages, tokenize=False, ...) does. The template sees
// messages, add_generation_prompt, tools (when given), bos_token, eos_token, unk_token,
// pad_token, the Extra variables, raise_exception and strftime_now.
func (t *Tokenizer) ApplyChatTemplate(messages []Message, opts ChatOptions) (string, error) {
	if t.config.ChatTemplate == "" {
		return "", fmt.Errorf("tokenizer: %s: tokenizer_config.json has no chat_template", t.file)
	}
	return RenderChatTemplate(t.config.ChatTemplate, messages, opts, map[string]any{
		"bos_token": t.config.BOSToken,
		"eos_token": t.config.EOSToken,
		"unk_token": t.config.UnkToken,
		"pad_token": t.config.PadToken,
	})
}

// RenderChatTemplate renders a Jinja chat template with the variables of ApplyChatTemplate;
// vars adds more (the special tokens). The rendering is bounded by opts.Limits: a template
// that recurses, loops or grows past them gets a *TemplateLimitError naming the limit.
// Renderings are serialized (see chat_limits.go).
func RenderChatTemplate(template string, messages []Message, opts ChatOptions, vars map[string]any) (out string, err error) {
	tpl, err := compileTemplate(template)
	if err != nil {
		return "", err
	}
	lim := opts.Limits.withDefaults()
	g := &renderGuard{lim: lim, deadline: time.Now().Add(lim.Timeout)}
	renderMu.Lock()
	activeGuard = g
	defer func() {
		activeGuard = nil
		renderMu.Unlock()
	}()
	defer func() { // the template engine is third-party code; its panics become errors
		if r := recover(); r != nil {
			out, err = "", fmt.Errorf("chat template: renderer failed: %v", r)
		}
	}()
	msgs := make([]any, len(messages))
	for i, m := range messages {
		msgs[i] = map[string]any{"role": m.Role, "content": m.Content}
	}
	var raised *TemplateError
	ctx := map[string]any{}
	for k, v := range vars {
		ctx[k] = v
	}
	for k, v := range opts.Extra {
		ctx[k] = v
	}
	ctx["messages"] = msgs
	ctx["add_generation_prompt"] = opts.AddGenerationPrompt
	if opts.Tools != nil {
		tools := make([]any, len(opts.Tools))
		for i, tl := range opts.Tools {
			tools[i] = tl
		}
		ctx["tools"] = tools
	}
	ctx["raise_exception"] = func(msg string) (string, error) {
		raised = &TemplateError{Message: msg}
		return "", raised
	}
	ctx["strftime_now"] = func(format string) string { return strftime(time.Now(), format) }
	out, err = tpl.ExecuteToString(exec.NewContext(ctx))
	if raised != nil {
		return "", raised
	}
	if g.err != nil {
		return "", g.err
	}
	if err != nil {
		return "", fmt.Errorf("chat template: %w", err)
	}
	return out, nil
}

var (
	templateMu    sync.Mutex
	templateCache = map[string]*exec.Template{}
	chatEnv       = newChatEnvironment()
)

// maxCachedTemplates bounds the compiled-template cache (a process sees one or two).
const maxCachedTemplates = 16

func compileTemplate(src string) (tpl *exec.Template, err error) {
	templateMu.Lock()
	defer templateMu.Unlock()
	if tpl, ok := templateCache[src]; ok {
		return tpl, nil
	}
	defer func() { // the parser is third-party code too
		if r := recover(); r != nil {
			tpl, err = nil, fmt.Errorf("chat template: cannot parse: parser failed: %v", r)
		}
	}()
	cfg := config.New()
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	if err := checkNesting(src, cfg); err != nil {
		return nil, err
	}
	tpl, err = exec.NewTemplate("chat_template", cfg, &onlyRootLoader{src: src}, chatEnv)
	if err != nil {
		msg := err.Error()
		if i := strings.LastIndex(msg, "': "); i >= 0 { // gonja repeats the whole source first
			msg = msg[i+3:]
		}
		return nil, fmt.Errorf("chat template: cannot parse: %s", msg)
	}
	if err := rewriteTemplate(tpl.Root()); err != nil {
		return nil, err
	}
	if len(templateCache) >= maxCachedTemplates {
		clear(templateCache)
	}
	templateCache[src] = tpl
	return tpl, nil
}

// pyToJSON is tojson as transformers defines it: json.dumps(x, ensure_ascii=False,
// indent=indent, separators=separators, sort_keys=sort_keys).
func pyToJSON(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	indent := -1
	if v, ok := params.KwArgs["indent"]; ok && !v.IsNil() {
		indent = v.Integer()
	} else if len(params.Args) > 0 && !params.Args[0].IsNil() {
		indent = params.Args[0].Integer()
	}
	limit := DefaultTemplateMaxOutputBytes
	if activeGuard != nil {
		limit = activeGuard.lim.MaxOutputBytes
	}
	var sb strings.Builder
	err := error(nil)
	if indent > limit {
		err = errTooBig
	} else {
		err = writePyJSON(&sb, in.Interface(), indent, 0, limit)
	}
	if errors.Is(err, errTooBig) && activeGuard != nil {
		return exec.AsValue(activeGuard.size(-1, "the result of tojson"))
	}
	if err != nil {
		return exec.AsValue(fmt.Errorf("tojson: %w", err))
	}
	return exec.AsValue(sb.String())
}

var errTooBig = errors.New("the result is too large")

// maxJSONDepth bounds tojson's nesting (a namespace can hold itself).
const maxJSONDepth = 512

func writePyJSON(sb *strings.Builder, v any, indent, depth, limit int) error {
	if depth > maxJSONDepth {
		return fmt.Errorf("the value nests deeper than %d levels", maxJSONDepth)
	}
	if sb.Len() > limit {
		return errTooBig
	}
	newline := func(d int) {
		if indent >= 0 && sb.Len()+indent*d <= limit {
			sb.WriteByte('\n')
			sb.WriteString(strings.Repeat(" ", indent*d))
		}
	}
	itemSep, keySep := ", ", ": "
	if indent >= 0 {
		itemSep = ","
	}
	switch x := v.(type) {
	case nil:
		sb.WriteString("null")
		return nil
	case *exec.Value:
		return writePyJSON(sb, x.Interface(), indent, depth, limit)
	case string:
		writePyString(sb, x)
		return nil
	case bool:
		if x {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
		return nil
	case float64:
		sb.WriteString(pyFloat(x))
		return nil
	case float32:
		sb.WriteString(pyFloat(float64(x)))
		return nil
	case *exec.Dict:
		if len(x.Pairs) == 0 {
			sb.WriteString("{}")
			return nil
		}
		sb.WriteByte('{')
		for i, p := range x.Pairs {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			writePyString(sb, p.Key.String())
			sb.WriteString(keySep)
			if err := writePyJSON(sb, p.Value, indent, depth+1, limit); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
		return nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		sb.WriteString(strconv.FormatInt(rv.Int(), 10))
		return nil
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		sb.WriteString(strconv.FormatUint(rv.Uint(), 10))
		return nil
	case reflect.Slice, reflect.Array:
		if rv.Len() == 0 {
			sb.WriteString("[]")
			return nil
		}
		sb.WriteByte('[')
		for i := 0; i < rv.Len(); i++ {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := writePyJSON(sb, rv.Index(i).Interface(), indent, depth+1, limit); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte(']')
		return nil
	case reflect.Map:
		if rv.Len() == 0 {
			sb.WriteString("{}")
			return nil
		}
		keys := make([]string, 0, rv.Len())
		vals := map[string]any{}
		for it := rv.MapRange(); it.Next(); {
			k := fmt.Sprint(it.Key().Interface())
			keys = append(keys, k)
			vals[k] = it.Value().Interface()
		}
		sort.Strings(keys)
		sb.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				sb.WriteString(itemSep)
			}
			newline(depth + 1)
			writePyString(sb, k)
			sb.WriteString(keySep)
			if err := writePyJSON(sb, vals[k], indent, depth+1, limit); err != nil {
				return err
			}
		}
		newline(depth)
		sb.WriteByte('}')
		return nil
	case reflect.Pointer:
		if rv.IsNil() {
			sb.WriteString("null")
			return nil
		}
		return writePyJSON(sb, rv.Elem().Interface(), indent, depth+1, limit)
	}
	return fmt.Errorf("cannot serialise a %T", v)
}

// writePyString writes s as json.dumps(s, ensure_ascii=False) does.
func writePyString(sb *strings.Builder, s string) {
	sb.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			sb.WriteString(`\"`)
		case '\\':
			sb.WriteString(`\\`)
		case '\n':
			sb.WriteString(`\n`)
		case '\r':
			sb.WriteString(`\r`)
		case '\t':
			sb.WriteString(`\t`)
		case '\b':
			sb.WriteString(`\b`)
		case '\f':
			sb.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(sb, `\u%04x`, r)
			} else {
				sb.WriteRune(r)
			}
		}
	}
	sb.WriteByte('"')
}

// pyFloat formats a float as Python's repr does.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Python writes the exponent with at least two digits: 1e-05, 1e+16.
		if i := strings.IndexByte(s, 'e'); i >= 0 {
			mant, exp := s[:i], s[i+1:]
			sign := exp[0]
			digits := exp[1:]
			if len(digits) < 2 {
				digits = "0" + digits
			}
			s = mant + "e" + string(sign) + digits
		}
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// strftime formats t with the C strftime directives templates use.
func strftime(t time.Time, format string) string {
	var sb strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			sb.WriteByte(format[i])
			continue
		}
		i++
		switch format[i] {
		case 'Y':
			sb.WriteString(strconv.Itoa(t.Year()))
		case 'm':
			fmt.Fprintf(&sb, "%02d", int(t.Month()))
		case 'd':
			fmt.Fprintf(&sb, "%02d", t.Day())
		case 'H':
			fmt.Fprintf(&sb, "%02d", t.Hour())
		case 'M':
			fmt.Fprintf(&sb, "%02d", t.Minute())
		case 'S':
			fmt.Fprintf(&sb, "%02d", t.Second())
		case 'B':
			sb.WriteString(t.Month().String())
		case 'b':
			sb.WriteString(t.Month().String()[:3])
		case 'A':
			sb.WriteString(t.Weekday().String())
		case 'a':
			sb.WriteString(t.Weekday().String()[:3])
		case 'y':
			fmt.Fprintf(&sb, "%02d", t.Year()%100)
		case 'j':
			fmt.Fprintf(&sb, "%03d", t.YearDay())
		case '%':
			sb.WriteByte('%')
		default:
			sb.WriteByte('%')
			sb.WriteByte(format[i])
		}
	}
	return sb.String()
}
