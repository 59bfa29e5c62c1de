package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
)

// apiError is an answer in OpenAI's error JSON:
// {"error": {"message", "type", "param", "code"}} with an HTTP status.
type apiError struct {
	Status  int     `json:"-"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

func (e *apiError) Error() string { return e.Message }

// badRequest is a 400 invalid_request_error about param ("" when none).
func badRequest(param, format string, a ...any) *apiError {
	e := &apiError{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, a...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = &param
	}
	return e
}

func withCode(e *apiError, code string) *apiError {
	e.Code = &code
	return e
}

// writeError writes e as OpenAI's error JSON.
func writeError(w http.ResponseWriter, e *apiError) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.Status)
	json.NewEncoder(w).Encode(map[string]any{"error": e})
}

// stringList is OpenAI's "string or array of strings" (stop).
type stringList []string

func (s *stringList) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*s = nil
		return nil
	}
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*s = stringList{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("want a string or an array of strings")
	}
	*s = many
	return nil
}

// content is a message's content: a string, or an array of parts of which
// only {"type": "text", "text": ...} are understood.
type content string

func (c *content) UnmarshalJSON(b []byte) error {
	if bytes.Equal(b, []byte("null")) {
		*c = ""
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*c = content(s)
		return nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(b, &parts); err != nil {
		return errors.New("want a string or an array of content parts")
	}
	var sb strings.Builder
	for i, p := range parts {
		if p.Type != "text" || p.Text == nil {
			return fmt.Errorf("part %d is of type %q; only text parts ({\"type\": \"text\", \"text\": ...}) are supported", i, p.Type)
		}
		sb.WriteString(*p.Text)
	}
	*c = content(sb.String())
	return nil
}

// message is one chat message.
type message struct {
	Role    string  `json:"role"`
	Content content `json:"content"`
}

// streamOptions is stream_options.
type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// params are the fields chat and completions requests share.
type params struct {
	Model               string          `json:"model"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	Temperature         *float64        `json:"temperature"`
	TopP                *float64        `json:"top_p"`
	TopK                *int            `json:"top_k"`
	MinP                *float64        `json:"min_p"`
	RepetitionPenalty   *float64        `json:"repetition_penalty"`
	RepetitionContext   *int            `json:"repetition_context_size"`
	Seed                *int64          `json:"seed"`
	Stop                stringList      `json:"stop"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
	StreamOptions       *streamOptions  `json:"stream_options"`
	PresencePenalty     *float64        `json:"presence_penalty"`
	FrequencyPenalty    *float64        `json:"frequency_penalty"`
	LogitBias           map[string]any  `json:"logit_bias"`
	Tools               json.RawMessage `json:"tools"`
	ResponseFormat      *struct {
		Type string `json:"type"`
	} `json:"response_format"`
}

// chatRequest is POST /v1/chat/completions' body.
type chatRequest struct {
	params
	Messages    []message `json:"messages"`
	Logprobs    *bool     `json:"logprobs"`
	TopLogprobs *int      `json:"top_logprobs"`
}

// completionRequest is POST /v1/completions' body.
type completionRequest struct {
	params
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
	BestOf   *int            `json:"best_of"`
}

// Limits on a request, besides the body size (Config.MaxBodyBytes).
const (
	maxStops        = 16   // stop strings per request
	maxStopBytes    = 256  // bytes per stop string
	maxTopLogprobs  = 20   // OpenAI's chat limit
	maxCompLogprobs = 5    // OpenAI's completions limit
	maxMessages     = 4096 // messages per chat request
)

// decodeBody reads one JSON object of at most limit bytes into v. Unknown
// fields are ignored and the Content-Type is not checked (curl -d sends
// application/x-www-form-urlencoded), as OpenAI-compatible servers do.
func decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any) *apiError {
	body := http.MaxBytesReader(w, r.Body, limit)
	data, err := io.ReadAll(body)
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return withCode(&apiError{Status: http.StatusRequestEntityTooLarge, Type: "invalid_request_error",
			Message: fmt.Sprintf("the request body is over the server's limit of %d bytes (mlxgo serve --max-body-bytes)", limit)}, "request_too_large")
	}
	if err != nil {
		return badRequest("", "reading the request body: %v", err)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return badRequest("", "the request body is empty, want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return badRequest("", "the request body is not valid JSON for this route: %v", jsonError(err, data))
	}
	if dec.More() {
		return badRequest("", "the request body holds more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		return badRequest("", "the request body has data after its JSON object")
	}
	return nil
}

// jsonError adds the byte offset to a syntax error.
func jsonError(err error, data []byte) error {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Errorf("%v (at byte %d of %d)", err, se.Offset, len(data))
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Errorf("field %q is a JSON %s, want %v", strings.TrimPrefix(te.Field, "params."), te.Value, te.Type)
	}
	return err
}

// settings are a request's generation settings once checked.
type settings struct {
	maxTokens    int
	maxGiven     bool // the request gave max_tokens (else the default, cut to the context left)
	temp, topP   float64
	topK         int
	minP         float64
	repPenalty   float64
	repContext   int
	seed         *uint64
	stop         []string
	stream       bool
	includeUsage bool
	logprobs     bool
	topLogprobs  int
}

// check validates the shared fields against the server's defaults.
func (p *params) check(d Defaults) (settings, *apiError) {
	s := settings{maxTokens: d.MaxTokens, temp: d.Temp, topP: d.TopP, topK: d.TopK, minP: d.MinP,
		repPenalty: d.RepetitionPenalty, repContext: d.RepetitionContext, stream: p.Stream}
	finite := func(name string, v *float64, lo, hi float64, dst *float64) *apiError {
		if v == nil {
			return nil
		}
		if math.IsNaN(*v) || *v < lo || *v > hi {
			return badRequest(name, "%s is %v, want a number in [%v, %v]", name, *v, lo, hi)
		}
		*dst = *v
		return nil
	}
	switch {
	case p.MaxTokens != nil && p.MaxCompletionTokens != nil && *p.MaxTokens != *p.MaxCompletionTokens:
		return s, badRequest("max_tokens", "max_tokens (%d) and max_completion_tokens (%d) disagree: give one", *p.MaxTokens, *p.MaxCompletionTokens)
	case p.N != nil && *p.N != 1:
		return s, badRequest("n", "n is %d; mlxgo serve generates one choice per request (n = 1)", *p.N)
	case p.PresencePenalty != nil && *p.PresencePenalty != 0:
		return s, badRequest("presence_penalty", "presence_penalty is not supported (use repetition_penalty)")
	case p.FrequencyPenalty != nil && *p.FrequencyPenalty != 0:
		return s, badRequest("frequency_penalty", "frequency_penalty is not supported (use repetition_penalty)")
	case len(p.LogitBias) > 0:
		return s, badRequest("logit_bias", "logit_bias is not supported")
	case len(p.Tools) > 0 && !bytes.Equal(p.Tools, []byte("null")) && !bytes.Equal(p.Tools, []byte("[]")):
		return s, badRequest("tools", "tools are not supported")
	case p.ResponseFormat != nil && p.ResponseFormat.Type != "" && p.ResponseFormat.Type != "text":
		return s, badRequest("response_format", "response_format %q is not supported (only \"text\")", p.ResponseFormat.Type)
	case p.StreamOptions != nil && !p.Stream:
		return s, badRequest("stream_options", "stream_options applies to streamed requests (\"stream\": true)")
	}
	for _, mt := range []struct {
		name string
		v    *int
	}{{"max_tokens", p.MaxTokens}, {"max_completion_tokens", p.MaxCompletionTokens}} {
		if mt.v != nil {
			if *mt.v < 1 {
				return s, badRequest(mt.name, "%s is %d, want >= 1", mt.name, *mt.v)
			}
			s.maxTokens, s.maxGiven = *mt.v, true
		}
	}
	if e := finite("temperature", p.Temperature, 0, 100, &s.temp); e != nil {
		return s, e
	}
	if e := finite("top_p", p.TopP, 0, 1, &s.topP); e != nil {
		return s, e
	}
	if e := finite("min_p", p.MinP, 0, 1, &s.minP); e != nil {
		return s, e
	}
	if e := finite("repetition_penalty", p.RepetitionPenalty, 0, 100, &s.repPenalty); e != nil {
		return s, e
	}
	if p.TopK != nil {
		if *p.TopK < 0 {
			return s, badRequest("top_k", "top_k is %d, want >= 0 (0: off)", *p.TopK)
		}
		s.topK = *p.TopK
	}
	if p.RepetitionContext != nil {
		if *p.RepetitionContext < 1 || *p.RepetitionContext > 1<<20 {
			return s, badRequest("repetition_context_size", "repetition_context_size is %d, want 1 to %d", *p.RepetitionContext, 1<<20)
		}
		s.repContext = *p.RepetitionContext
	}
	if p.Seed != nil {
		if *p.Seed < 0 {
			return s, badRequest("seed", "seed is %d, want >= 0", *p.Seed)
		}
		v := uint64(*p.Seed)
		s.seed = &v
	}
	if len(p.Stop) > maxStops {
		return s, badRequest("stop", "%d stop strings, want at most %d", len(p.Stop), maxStops)
	}
	for i, st := range p.Stop {
		if st == "" {
			return s, badRequest("stop", "stop[%d] is empty", i)
		}
		if len(st) > maxStopBytes {
			return s, badRequest("stop", "stop[%d] is %d bytes long, want at most %d", i, len(st), maxStopBytes)
		}
	}
	s.stop = p.Stop
	if p.StreamOptions != nil {
		s.includeUsage = p.StreamOptions.IncludeUsage
	}
	return s, nil
}
