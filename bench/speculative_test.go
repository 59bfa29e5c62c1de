package bench

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// A speculative child on the tiny fixture drafting by prompt lookup: plain
// and speculative runs, each with every generated token timed, and drafts
// counted.
func TestRunSpecChild(t *testing.T) {
	ids := []int32{5, 6, 7, 8, 5, 6, 7, 8, 5, 6, 7}
	var out, log bytes.Buffer
	o := SpecChildOptions{ChildOptions: ChildOptions{Model: fixture, Backend: "cpu", IDs: ids, DecodeTokens: 6, Reps: 1}, Lookup: 2, NumDraft: 3}
	if err := RunSpecChild(o, &out, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	var rep ChildReport
	if err := json.Unmarshal(lastLine(out.Bytes()), &rep); err != nil {
		t.Fatalf("report %q: %v", out.String(), err)
	}
	if len(rep.Runs) != 2 || rep.Runs[0].Kind != "plain" || rep.Runs[1].Kind != "speculative" {
		t.Fatalf("runs: got %+v, want one plain and one speculative", rep.Runs)
	}
	for _, r := range rep.Runs {
		if r.Generated != 5 || r.Seconds <= 0 {
			t.Errorf("%s: got %d tokens after the first in %gs, want 5 in a positive time", r.Kind, r.Generated, r.Seconds)
		}
	}
	if s := rep.Runs[1]; s.PromptTokens < 1 || s.Batch > s.PromptTokens {
		t.Errorf("speculative: %d drafted, %d accepted; want drafts from the repeated prompt and accepted <= drafted", s.PromptTokens, s.Batch)
	}
	o.Lookup = 0
	if err := RunSpecChild(o, &out, &log); err == nil || !strings.Contains(err.Error(), "a draft model or a prompt-lookup size") {
		t.Errorf("no drafter: got %v, want an error asking for one", err)
	}
}

func TestParseLlamaSpec(t *testing.T) {
	out := `main: ... 
encoded   12 tokens in    0.100 seconds, speed:  120.000 t/s
decoded   64 tokens in    0.800 seconds, speed:   80.000 t/s

n_draft   = 4
n_predict = 64
n_drafted = 40
n_accept  = 30
accept    = 75.000%`
	rate, d, a, err := parseLlamaSpec(out)
	if err != nil || rate != 80 || d != 40 || a != 30 {
		t.Errorf("got %g tok/s, %d drafted, %d accepted, %v; want 80, 40, 30", rate, d, a, err)
	}
	if _, _, _, err := parseLlamaSpec("error: failed to load model\n"); err == nil || !strings.Contains(err.Error(), "failed to load model") {
		t.Errorf("no statistics: got %v, want an error quoting the output", err)
	}
}
