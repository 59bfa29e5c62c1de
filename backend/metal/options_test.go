//go:build mlx

package metal

import (
	"errors"
	"strings"
	"testing"

	"github.com/mlxgo/mlxgo/backend"
)

func TestOptions(t *testing.T) {
	cases := []struct {
		name    string
		opts    backend.Options
		wantErr string // "" for success
	}{
		{"default", backend.Options{}, ""},
		{"cpu", backend.Options{Device: "cpu"}, ""},
		{"reference", backend.Options{Precision: "reference"}, ""},
		{"bad-device", backend.Options{Device: "tpu"}, "unknown device"},
		{"bad-precision", backend.Options{Precision: "high"}, "unknown precision"},
		{"bad-threads", backend.Options{Threads: -1}, "Threads"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b, err := backend.Open("mlx", c.opts)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Errorf("got %v, want an error mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if c.opts.Device == "cpu" && b.(*Backend).Device() != "cpu" {
				t.Errorf("got device %q, want cpu", b.(*Backend).Device())
			}
		})
	}
	// "gpu" opens only where MLX has a GPU backend.
	probe := open(t)
	b, err := New(backend.Options{Device: "gpu"})
	switch {
	case probe.Device() == "gpu" && err != nil:
		t.Errorf("device gpu: %v, but the default device is the GPU", err)
	case probe.Device() == "cpu" && err == nil:
		b.Close()
		t.Errorf("device gpu opened on an MLX build whose default device is the CPU")
	case err == nil:
		b.Close()
	}
}

// Do after Close is an *OpError (the MLX thread is gone); the rest of
// Close's contract is backendtest's.
func TestDoAfterClose(t *testing.T) {
	b, err := New(backend.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	var oe *backend.OpError
	if err := b.Do(func() error { return nil }); !errors.As(err, &oe) {
		t.Errorf("Do after Close: got %v, want an *backend.OpError", err)
	}
}
