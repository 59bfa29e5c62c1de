package server_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/server"
)

// FuzzRequest: no request body crashes the server or gets a 500: every
// answer is 200 (JSON, or server-sent events ending in [DONE]) or an
// OpenAI error JSON with a 4xx status (issue 19). The seeds are the
// requests of the other tests and malformed ones.
func FuzzRequest(f *testing.F) {
	for _, s := range []string{
		`{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}], "logprobs": true, "top_logprobs": 2, "max_tokens": 2}`,
		`{"prompt": [5, 6, 7], "max_tokens": 4, "stream": true, "stream_options": {"include_usage": true}}`,
		`{"prompt": "abc", "max_tokens": 3, "stop": ["b", "cd"], "temperature": 0.7, "seed": 3, "top_k": 5, "top_p": 0.9, "min_p": 0.1}`,
		`{"prompt": [[1, 2]], "logprobs": 3, "max_tokens": 2, "repetition_penalty": 1.2}`,
		`{"messages": [`, ``, `[]`, `null`, `{"prompt": [1e30]}`, `{"prompt": [1], "max_tokens": 1e300}`,
		`{"prompt": [1], "n": 2}`, `{"prompt": {"a": 1}}`, `{"prompt": ["a", "b"]}`, `{"prompt": [[[1]]]}`,
		`{"messages": [{"role": "wizard", "content": "x"}]}`, `{"prompt": [1], "temperature": NaN}`,
	} {
		f.Add(s, true)
		f.Add(s, false)
	}
	fx := newFixture(f, func(c *server.Config) { c.MaxBodyBytes = 1 << 16; c.Defaults.MaxTokens = 4 })
	h := fx.srv.Handler()
	f.Fuzz(func(t *testing.T, body string, chat bool) {
		route := "/v1/completions"
		if chat {
			route = "/v1/chat/completions"
		}
		req := httptest.NewRequest("POST", route, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		out := w.Body.String()
		switch {
		case w.Code == 200 && w.Header().Get("Content-Type") == "text/event-stream":
			if !strings.HasSuffix(out, "data: [DONE]\n\n") {
				t.Fatalf("stream without [DONE]: %q", out)
			}
		case w.Code == 200:
			var v map[string]any
			if err := json.Unmarshal([]byte(out), &v); err != nil || v["choices"] == nil {
				t.Fatalf("200 with %q: %v", out, err)
			}
		case w.Code >= 400 && w.Code < 500:
			var e struct {
				Error struct {
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.Unmarshal([]byte(out), &e); err != nil || e.Error.Message == "" {
				t.Fatalf("status %d with %q: not an error JSON (%v)", w.Code, out, err)
			}
		default:
			t.Fatalf("status %d for %q: %s", w.Code, body, out)
		}
	})
}
