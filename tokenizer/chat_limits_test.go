package tokenizer

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestTemplateLimits feeds templates that recurse, loop or grow without bound and checks
// that each stops with a *TemplateLimitError naming the limit hit (issue 19). Before the
// limits, the first crashed the process (Go stack overflow), the next two allocated 4 GB and
// the nested loops ran for hours.
func TestTemplateLimits(t *testing.T) {
	small := TemplateLimits{MaxSteps: 20_000, MaxOutputBytes: 1 << 20, MaxDepth: 50}
	cases := []struct {
		name, src string
		lim       TemplateLimits
		limit     string
	}{
		{"recursive macro", `{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}`, small, "MaxDepth"},
		{"recursive macro default limits", `{% macro f(n) %}{{ f(n+1) }}{% endmacro %}{{ f(0) }}`, TemplateLimits{}, "MaxDepth"},
		{"recursive macro through call", `{% macro m() %}{% call m() %}x{% endcall %}{% endmacro %}{{ m() }}`, small, "MaxDepth"},
		{"recursive loop", `{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}`, small, "MaxDepth"},
		{"string repeat", `{{ 'a' * 4000000000 }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"int times string", `{{ 4000000000 * 'a' }}`, TemplateLimits{}, "MaxOutputBytes"},
		// Found by FuzzChatTemplate: an unreadable byte the lexer skips made the operator's text "\xcd*" (matched by text, it ran unchecked: 3.9 GB).
		{"string repeat, unreadable byte", "{{ 'a'\xcd* 4000000000 }}", TemplateLimits{}, "MaxOutputBytes"},
		{"string repeat, unreadable byte, not printed", "{% set s = 'a'\xcd* 100000000 %}{{ 1 }}", TemplateLimits{}, "MaxOutputBytes"},
		{"string doubled 40 times", `{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}`, small, "MaxOutputBytes"},
		{"string doubled with ~", `{% set ns = namespace(s='a') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}`, small, "MaxOutputBytes"},
		{"nested loops", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`, small, "MaxSteps"},
		{"nested loops over lists", `{% set l = range(1000)|list %}{% for i in l %}{% for j in l %}{% endfor %}{% endfor %}`, small, "MaxSteps"},
		{"huge range", `{{ range(4000000000)|length }}`, TemplateLimits{}, "MaxSteps"},
		{"text emitted in a loop", `{% for i in range(10000) %}{{ 'x' * 1000 }}{% endfor %}`, small, "MaxOutputBytes"},
		{"filter center", `{{ 'x'|center(4000000000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"filter format", `{{ '%4000000000d'|format(1) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"filter indent", `{{ ('a\n' * 100000)|indent(100000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"filter replace", `{{ ('a' * 100000)|replace('', 'b' * 100000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"method ljust", `{{ 'x'.ljust(4000000000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"method replace", `{% set s = 'a' * 100000 %}{{ s.replace('a', 'b' * 100000, -1) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"method format nested width", `{{ '{:>{}}'.format('a', 4000000000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		// 500 references to one 1 MB string: printing it would build a 500 MB string.
		{"printed list of big strings", `{% set ns = namespace(l=[]) %}{% set s = 'a' * 1000000 %}{% for i in range(500) %}{% set ns.l = ns.l + [s] %}{% endfor %}{{ ns.l }}`, small, "MaxOutputBytes"},
		{"joined list of big strings", `{% set ns = namespace(l=[]) %}{% set s = 'a' * 100000 %}{% for i in range(100) %}{% set ns.l = ns.l + [s] %}{% endfor %}{{ ns.l|join(',') }}`, small, "MaxOutputBytes"},
		{"list concatenated to a string", `{% set ns = namespace(l=[]) %}{% set s = 'a' * 100000 %}{% for i in range(100) %}{% set ns.l = ns.l + [s] %}{% endfor %}{{ 'x' ~ ns.l }}`, small, "MaxOutputBytes"},
		{"tojson indent", `{{ messages|tojson(indent=4000000000) }}`, TemplateLimits{}, "MaxOutputBytes"},
		{"timeout", `{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}`,
			TemplateLimits{Timeout: 20 * time.Millisecond, MaxSteps: 1 << 40}, "Timeout"},
		{"deep brackets", "{{ " + strings.Repeat("(", 1000) + "1" + strings.Repeat(")", 1000) + " }}", TemplateLimits{}, "MaxTemplateNesting"},
		{"deep blocks", strings.Repeat("{% if true %}", 1000) + strings.Repeat("{% endif %}", 1000), TemplateLimits{}, "MaxTemplateNesting"},
		{"long operator chain", "{{ " + strings.Repeat("1+", 5000) + "1 }}", TemplateLimits{}, "MaxTemplateNesting"},
		{"huge source", strings.Repeat("x", MaxTemplateSourceBytes+1), TemplateLimits{}, "MaxTemplateSourceBytes"},
	}
	msgs := []Message{{Role: "user", Content: "hi"}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			out, err := RenderChatTemplate(c.src, msgs, ChatOptions{Limits: c.lim}, nil)
			var le *TemplateLimitError
			if !errors.As(err, &le) || le.Limit != c.limit {
				t.Fatalf("got (%.40q, %v), want a TemplateLimitError on %s", out, err, c.limit)
			}
			if !strings.Contains(err.Error(), c.limit) {
				t.Errorf("error %q does not name the limit %s", err, c.limit)
			}
			if d := time.Since(start); d > 20*time.Second { // the unbounded forms ran for hours
				t.Errorf("took %v to stop", d)
			}
		})
	}
}

// TestTemplateRuntimeErrors checks inputs transformers rejects: a division by zero raises
// ZeroDivisionError in Jinja; include/import read files in gonja but find no loader in
// transformers' environment; a namespace holding itself would overflow gonja's stack.
func TestTemplateRuntimeErrors(t *testing.T) {
	cases := []struct{ name, src, want string }{
		{"divide", `{{ 1/0 }}`, "division by zero"},
		{"divide float", `{{ 1.5 / 0.0 }}`, "division by zero"},
		{"floor divide", `{{ 1 // 0 }}`, "division by zero"},
		{"modulo", `{{ 7 % 0 }}`, "division by zero"},
		{"include file", `{% include '/etc/passwd' %}`, "include, import and extends are not supported"},
		{"include itself", `{% include 'chat_template' %}`, "include, import and extends are not supported"},
		{"import", `{% import '/etc/hosts' as h %}`, "include, import and extends are not supported"},
		{"recursive block", `{% block a %}x{{ self.a() }}{% endblock %}`, "{% block %} is not supported"},
		{"namespace holding itself", `{% set ns = namespace(a=1) %}{% set ns.a = ns %}{{ ns }}`, "cannot contain itself"},
		{"namespace holding itself in a list", `{% set ns = namespace(a=1) %}{% set ns.b = [1, {'x': ns}] %}{{ ns }}`, "cannot contain itself"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := RenderChatTemplate(c.src, nil, ChatOptions{}, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got (%q, %v), want an error containing %q", out, err, c.want)
			}
		})
	}
}

// TestTemplateSemantics checks renderings the hooks must not change, and messages[-1], which
// gonja's own item access rejected on a one-message list though Jinja renders it. Each want
// is what Jinja (Python semantics) renders.
func TestTemplateSemantics(t *testing.T) {
	one := []Message{{Role: "user", Content: "hi"}}
	two := []Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "hi"}}
	cases := []struct {
		name string
		msgs []Message
		src  string
		want string
	}{
		{"last message of one", one, `{{ messages[-1]['content'] }}`, "hi"},
		{"last message of two", two, `{{ messages[-1].content }}|{{ messages[-2]['role'] }}`, "hi|system"},
		{"index past the start", one, `[{{ messages[-2] }}]`, "[]"},
		{"string index from the end", one, `{{ 'abc'[-3] }}{{ 'abc'[-1] }}{{ 'abc'[0] }}`, "aca"},
		{"arithmetic", nil, `{{ 7 % 3 }} {{ 7 // 2 }} {{ 1 + 2 }} {{ 5 - 7 }} {{ 'a' ~ 1 }} {{ 'a' + 'b' }}`, "1 3 3 -2 a1 ab"},
		{"repeat", nil, `{{ 'ab' * 3 }}|{{ 3 * 'ab' }}|{{ 'ab' * 0 }}|{{ 'ab' * -1 }}`, "ababab|ababab||"},
		{"list concat", nil, `{{ ([1] + [2, 3])|length }}`, "3"},
		{"loop and macro", two, `{% macro r(m) %}<{{ m.role }}>{% endmacro %}{% for m in messages %}{{ r(m) }}{% if not loop.last %},{% endif %}{% endfor %}`, "<system>,<user>"},
		{"namespace", two, `{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}`, "2"},
		{"range", nil, `{% for i in range(3) %}{{ i }}{% endfor %}{% for i in range(5, 0, -2) %}{{ i }}{% endfor %}`, "012531"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RenderChatTemplate(c.src, c.msgs, ChatOptions{}, nil)
			if err != nil || got != c.want {
				t.Fatalf("got (%q, %v), want %q", got, err, c.want)
			}
		})
	}
}

// TestChatTemplateListForm checks the list form of tokenizer_config.json's chat_template: the
// entry named "default" is used, and one without "template" is an error (it ran the prompt
// raw, as if the model had no template; transformers fails on it).
func TestChatTemplateListForm(t *testing.T) {
	cases := []struct{ name, cfg, want, err string }{
		{"default used", `{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}`, "D", ""},
		{"default without template", `{"chat_template": [{"name": "default"}]}`, "", `the entry named "default" has no "template"`},
		{"default with empty template", `{"chat_template": [{"name": "default", "template": ""}]}`, "", `the entry named "default" has no "template"`},
		{"entry without name", `{"chat_template": [{"template": "D"}]}`, "", `entry 0 has no "name"`},
		{"no default", `{"chat_template": [{"name": "tool_use", "template": "T"}]}`, "", `without one named "default"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg, err := parseConfig([]byte(c.cfg))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "chat_template") {
					t.Fatalf("got (%q, %v), want an error naming chat_template and containing %q", cfg.ChatTemplate, err, c.err)
				}
				return
			}
			if err != nil || cfg.ChatTemplate != c.want {
				t.Fatalf("got (%q, %v), want %q", cfg.ChatTemplate, err, c.want)
			}
		})
	}
}

// TestConcurrentRenders: renderings from several goroutines (serialized by the guard's lock)
// each get their own counters: a small limit in one does not leak into another.
func TestConcurrentRenders(t *testing.T) {
	src := `{% for i in range(n) %}{{ i }}{% endfor %}`
	errs := make(chan error, 8)
	for g := range 8 {
		go func() {
			n := 50
			lim := TemplateLimits{}
			if g%2 == 1 {
				n, lim = 5000, TemplateLimits{MaxSteps: 100}
			}
			out, err := RenderChatTemplate(src, nil, ChatOptions{Extra: map[string]any{"n": n}, Limits: lim}, nil)
			var le *TemplateLimitError
			switch {
			case g%2 == 0 && (err != nil || !strings.HasPrefix(out, "0123")):
				errs <- fmt.Errorf("goroutine %d: got (%.20q, %v), want the numbers", g, out, err)
			case g%2 == 1 && (!errors.As(err, &le) || le.Limit != "MaxSteps"):
				errs <- fmt.Errorf("goroutine %d: got %v, want MaxSteps", g, err)
			default:
				errs <- nil
			}
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
