package debug

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/mlxgo/mlxgo/backend"
	"github.com/mlxgo/mlxgo/tensor"
)

// DumpFormat is the "format" metadata value of a tap dump.
const DumpFormat = "mlxgo-taps"

// Meta describes how a dump was made. In the safetensors file each field is
// a "__metadata__" string (see conformance/README.md, "Tap dumps").
type Meta struct {
	Checkpoint string  `json:"checkpoint"` // the checkpoint directory's base name
	PromptIDs  []int32 `json:"prompt_ids"` // the token ids, one sequence
	Backend    string  `json:"backend"`    // "cpu", "mlx", or "mlx_lm" for the oracle
	Precision  string  `json:"precision"`  // the backend's precision ("reference", "high"; "" when it has one)
	Device     string  `json:"device"`     // "cpu", "gpu" or ""
	DType      string  `json:"dtype"`      // the activation dtype ("F32", "BF16", ...)
	Producer   string  `json:"producer"`   // what wrote it ("mlxgo", or the oracle's versions)
}

// Label is a short description, "backend[:precision]".
func (m Meta) Label() string {
	if m.Precision == "" || m.Precision == "reference" {
		return m.Backend
	}
	return m.Backend + ":" + m.Precision
}

// Dump is a set of taps in graph order, on the host.
type Dump struct {
	Meta  Meta
	Names []string // graph order
	Taps  map[string]*tensor.Dense
}

// Get returns the named tap, or nil.
func (d *Dump) Get(name string) *tensor.Dense { return d.Taps[name] }

// Recorder collects taps on the host as a forward pass makes them. Its Tap
// method is an nn.Tap (pass r.Tap as minicpm5.ForwardOptions.Tap). It copies
// every array with ToHost at once, so it works on lazy backends and with
// arrays freed when their scope closes. The first error is kept; later taps
// are ignored.
type Recorder struct {
	b     backend.Backend
	names []string
	taps  map[string]*tensor.Dense
	err   error
}

// NewRecorder returns an empty recorder for arrays of b.
func NewRecorder(b backend.Backend) *Recorder {
	return &Recorder{b: b, taps: map[string]*tensor.Dense{}}
}

// Tap copies x to the host under name.
func (r *Recorder) Tap(name string, x backend.Array) {
	if r.err != nil {
		return
	}
	if _, dup := r.taps[name]; dup {
		r.err = fmt.Errorf("debug: tap %q recorded twice (one forward pass per recorder)", name)
		return
	}
	t, err := r.b.ToHost(x)
	if err != nil {
		r.err = fmt.Errorf("debug: tap %q: %w", name, err)
		return
	}
	r.names = append(r.names, name)
	r.taps[name] = t
}

// Err returns the first error met while recording.
func (r *Recorder) Err() error { return r.err }

// Dump returns what was recorded, in the order recorded, with meta.
func (r *Recorder) Dump(meta Meta) (*Dump, error) {
	if r.err != nil {
		return nil, r.err
	}
	if len(r.names) == 0 {
		return nil, fmt.Errorf("debug: no taps recorded")
	}
	return &Dump{Meta: meta, Names: append([]string(nil), r.names...), Taps: r.taps}, nil
}

// Write writes the dump to path as safetensors: the taps under their names
// in graph order, Meta in "__metadata__".
func (d *Dump) Write(path string) error {
	ts := make([]*tensor.Dense, len(d.Names))
	for i, n := range d.Names {
		ts[i] = d.Taps[n]
	}
	ids := make([]string, len(d.Meta.PromptIDs))
	for i, id := range d.Meta.PromptIDs {
		ids[i] = strconv.Itoa(int(id))
	}
	meta := map[string]string{
		"format":     DumpFormat,
		"version":    "1",
		"checkpoint": d.Meta.Checkpoint,
		"prompt_ids": strings.Join(ids, ","),
		"backend":    d.Meta.Backend,
		"precision":  d.Meta.Precision,
		"device":     d.Meta.Device,
		"dtype":      d.Meta.DType,
		"producer":   d.Meta.Producer,
	}
	return tensor.WriteSafetensors(path, d.Names, ts, meta)
}

// ReadDump reads a tap dump written by Dump.Write or by the oracle's
// taps.py. Taps are returned in graph order whatever the file's order.
func ReadDump(path string) (*Dump, error) {
	f, err := tensor.OpenSafetensors(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	md := f.Metadata()
	if md["format"] != DumpFormat {
		return nil, fmt.Errorf("%s: __metadata__ format is %q, want %q (a tap dump from mlxgo diff --dump or conformance/oracle/taps.py)", path, md["format"], DumpFormat)
	}
	if md["version"] != "1" {
		return nil, fmt.Errorf("%s: __metadata__ version is %q, want \"1\"", path, md["version"])
	}
	ids, err := ParseIDs(md["prompt_ids"])
	if err != nil {
		return nil, fmt.Errorf("%s: __metadata__ prompt_ids: %w", path, err)
	}
	d := &Dump{
		Meta: Meta{Checkpoint: md["checkpoint"], PromptIDs: ids, Backend: md["backend"], Precision: md["precision"],
			Device: md["device"], DType: md["dtype"], Producer: md["producer"]},
		Taps: map[string]*tensor.Dense{},
	}
	for _, n := range f.Names() {
		t, err := f.TensorCopy(n)
		if err != nil {
			return nil, err
		}
		if !t.DType.IsFloat() {
			return nil, fmt.Errorf("%s: tensor %q has dtype %v, want a float dtype (taps are activations)", path, n, t.DType)
		}
		d.Taps[n] = t
	}
	if len(d.Taps) == 0 {
		return nil, fmt.Errorf("%s: no taps", path)
	}
	d.Names = orderTaps(f.Names())
	return d, nil
}

// ParseIDs parses comma-separated token ids ("1,2,3"; spaces allowed).
func ParseIDs(s string) ([]int32, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("no token ids")
	}
	var ids []int32
	for i, f := range strings.Split(s, ",") {
		v, err := strconv.ParseInt(strings.TrimSpace(f), 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("token id %d is %q, want a non-negative integer", i, f)
		}
		ids = append(ids, int32(v))
	}
	return ids, nil
}
