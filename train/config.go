package train

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/mlxgo/mlxgo/internal/safefile"
	"github.com/mlxgo/mlxgo/lora"
)

// maxConfigBytes bounds a -c YAML config file (mlx_lm's are a few KB).
const maxConfigBytes = 1 << 20

// Config holds mlx_lm.lora's options, named as its YAML config file
// (-c) and adapter_config.json name them.
type Config struct {
	Model                 string                    `yaml:"model" json:"model"`
	Train                 bool                      `yaml:"train" json:"train"`
	FineTuneType          string                    `yaml:"fine_tune_type" json:"fine_tune_type"`
	Optimizer             string                    `yaml:"optimizer" json:"optimizer"`
	OptimizerConfig       map[string]map[string]any `yaml:"optimizer_config" json:"optimizer_config"`
	Data                  string                    `yaml:"data" json:"data"`
	Seed                  int                       `yaml:"seed" json:"seed"`
	NumLayers             int                       `yaml:"num_layers" json:"num_layers"`
	BatchSize             int                       `yaml:"batch_size" json:"batch_size"`
	Iters                 int                       `yaml:"iters" json:"iters"`
	ValBatches            int                       `yaml:"val_batches" json:"val_batches"`
	LearningRate          float64                   `yaml:"learning_rate" json:"learning_rate"`
	StepsPerReport        int                       `yaml:"steps_per_report" json:"steps_per_report"`
	StepsPerEval          int                       `yaml:"steps_per_eval" json:"steps_per_eval"`
	ResumeAdapterFile     string                    `yaml:"resume_adapter_file" json:"resume_adapter_file"`
	AdapterPath           string                    `yaml:"adapter_path" json:"adapter_path"`
	SaveEvery             int                       `yaml:"save_every" json:"save_every"`
	Test                  bool                      `yaml:"test" json:"test"`
	TestBatches           int                       `yaml:"test_batches" json:"test_batches"`
	MaxSeqLength          int                       `yaml:"max_seq_length" json:"max_seq_length"`
	GradCheckpoint        bool                      `yaml:"grad_checkpoint" json:"grad_checkpoint"`
	GradAccumulationSteps int                       `yaml:"grad_accumulation_steps" json:"grad_accumulation_steps"`
	LRSchedule            *Schedule                 `yaml:"lr_schedule" json:"lr_schedule"`
	LoRAParameters        lora.Params               `yaml:"lora_parameters" json:"lora_parameters"`
	MaskPrompt            bool                      `yaml:"mask_prompt" json:"mask_prompt"`
	TextFeature           string                    `yaml:"text_feature" json:"text_feature,omitempty"`
	PromptFeature         string                    `yaml:"prompt_feature" json:"prompt_feature,omitempty"`
	CompletionFeature     string                    `yaml:"completion_feature" json:"completion_feature,omitempty"`
	ChatFeature           string                    `yaml:"chat_feature" json:"chat_feature,omitempty"`

	// mlxgo's own options (segment.go, headloss.go): the segmented
	// backward's segment size, or the memory budget it is chosen from,
	// and the rows of the chunked loss (0: plain, or the default chunk
	// when segmenting).
	SegmentLayers     int    `yaml:"segment_layers" json:"segment_layers,omitempty"`
	TrainMemoryBudget string `yaml:"train_memory_budget" json:"train_memory_budget,omitempty"`
	LossChunk         int    `yaml:"loss_chunk" json:"loss_chunk,omitempty"`
	// NoCompile runs the training steps op by op (Trainer.NoCompile).
	NoCompile bool `yaml:"no_compile" json:"no_compile,omitempty"`

	// ORPO (not mlx_lm's): Loss "orpo" trains on preference pairs
	// (LoadPreferenceDir) with λ = ORPOLambda; ORPOTwoForwards reads each
	// pair as two forwards instead of one prefix-shared forward, whose
	// attention ORPOAttention picks: "blocked" (the default) or "dense".
	Loss            string  `yaml:"loss" json:"loss,omitempty"`
	ORPOLambda      float64 `yaml:"orpo_lambda" json:"orpo_lambda,omitempty"`
	ORPOTwoForwards bool    `yaml:"orpo_two_forwards" json:"orpo_two_forwards,omitempty"`
	ORPOAttention   string  `yaml:"orpo_attention" json:"orpo_attention,omitempty"`

	// mlx_lm.lora options that change nothing here (logging services,
	// the allocator cache, remote code, the config file's own name):
	// accepted in a config file and ignored.
	ReportTo            any `yaml:"report_to" json:"-"`
	ProjectName         any `yaml:"project_name" json:"-"`
	TrustRemoteCode     any `yaml:"trust_remote_code" json:"-"`
	ClearCacheThreshold any `yaml:"clear_cache_threshold" json:"-"`
	ConfigFile          any `yaml:"config" json:"-"`
}

// Defaults are mlx_lm.lora's CONFIG_DEFAULTS.
func Defaults() Config {
	return Config{
		Model: "", FineTuneType: "lora", Optimizer: "adam", Data: "data", Seed: 0, NumLayers: 16,
		BatchSize: 4, Iters: 1000, ValBatches: 25, LearningRate: 1e-5, StepsPerReport: 10, StepsPerEval: 200,
		AdapterPath: "adapters", SaveEvery: 100, TestBatches: 500, MaxSeqLength: 2048, GradAccumulationSteps: 1,
		LoRAParameters: lora.Params{Rank: 8, Dropout: 0, Scale: 20},
		Loss:           "default", ORPOLambda: DefaultORPOLambda,
	}
}

// ReadConfig decodes a YAML config file (mlx_lm.lora -c) over c: each
// key the file sets replaces c's value. A key mlx_lm.lora does not read,
// or one this trainer does not implement, is an error naming it and its
// line.
func ReadConfig(path string, c *Config) error {
	raw, err := safefile.ReadFile(path, maxConfigBytes)
	if err != nil {
		return fmt.Errorf("train: config: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	if err := dec.Decode(c); err != nil && err != io.EOF {
		return fmt.Errorf("train: config %s: %w", path, err)
	}
	return nil
}

// Check returns an error naming the first option of c that is out of
// range, before any model is loaded: mlx_lm.lora fails on these later
// (or, for val_batches 0 or a NaN rate, prints NaN losses).
func (c Config) Check() error {
	bad := func(name string, v any, want string) error {
		return fmt.Errorf("train: %s %v: want %s", name, v, want)
	}
	finite := func(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }
	switch {
	case c.FineTuneType != "lora" && c.FineTuneType != "dora":
		return bad("fine_tune_type", fmt.Sprintf("%q", c.FineTuneType), `"lora" or "dora" (mlx_lm's "full" is not implemented)`)
	case c.Optimizer != "adam" && c.Optimizer != "adamw" && c.Optimizer != "sgd":
		return bad("optimizer", fmt.Sprintf("%q", c.Optimizer), "adam, adamw or sgd")
	case c.Seed < 0 || int64(c.Seed) > math.MaxUint32:
		return bad("seed", c.Seed, "0 to 2^32-1 (numpy's seed range)")
	case c.BatchSize < 1:
		return bad("batch_size", c.BatchSize, "at least 1")
	case c.Train && c.Iters < 1:
		return bad("iters", c.Iters, "at least 1")
	case c.ValBatches < -1 || c.ValBatches == 0:
		return bad("val_batches", c.ValBatches, "-1 (the whole set) or at least 1")
	case c.TestBatches < -1 || c.TestBatches == 0:
		return bad("test_batches", c.TestBatches, "-1 (the whole set) or at least 1")
	case !finite(c.LearningRate):
		return bad("learning_rate", c.LearningRate, "a finite number")
	case c.StepsPerReport < 1:
		return bad("steps_per_report", c.StepsPerReport, "at least 1")
	case c.StepsPerEval < 1:
		return bad("steps_per_eval", c.StepsPerEval, "at least 1")
	case c.SaveEvery < 1:
		return bad("save_every", c.SaveEvery, "at least 1")
	case c.MaxSeqLength < 1:
		return bad("max_seq_length", c.MaxSeqLength, "at least 1")
	case c.GradAccumulationSteps < 1:
		return bad("grad_accumulation_steps", c.GradAccumulationSteps, "at least 1")
	case c.LoRAParameters.Rank < 1:
		return bad("lora_parameters.rank", c.LoRAParameters.Rank, "at least 1")
	case !finite(c.LoRAParameters.Scale):
		return bad("lora_parameters.scale", c.LoRAParameters.Scale, "a finite number")
	case !(c.LoRAParameters.Dropout >= 0 && c.LoRAParameters.Dropout < 1):
		return bad("lora_parameters.dropout", c.LoRAParameters.Dropout, "0 <= dropout < 1")
	}
	if c.LRSchedule != nil {
		if c.LRSchedule.Name == "" {
			return errors.New("train: lr_schedule has no name (want cosine_decay or linear_schedule, as mlx_lm's build_schedule)")
		}
		if err := c.LRSchedule.check(); err != nil {
			return err
		}
	}
	for kind := range c.OptimizerConfig {
		if kind != "adam" && kind != "adamw" && kind != "sgd" {
			return fmt.Errorf("train: optimizer_config.%s: not an optimizer (want adam, adamw or sgd)", kind)
		}
	}
	oc, err := c.optimizerConfig(c.Optimizer)
	if err != nil {
		return err
	}
	return oc.check(c.Optimizer)
}

// optimizerConfig is MLX's defaults for kind with c.OptimizerConfig[kind]
// over them.
func (c Config) optimizerConfig(kind string) (OptimizerConfig, error) {
	cfg := DefaultOptimizerConfig(kind)
	given := c.OptimizerConfig[kind]
	allowed := map[string][]string{
		"adam":  {"betas", "eps", "bias_correction"},
		"adamw": {"betas", "eps", "bias_correction", "weight_decay"},
		"sgd":   {"momentum", "weight_decay", "dampening", "nesterov"},
	}[kind]
	for k := range given {
		if !slices.Contains(allowed, k) {
			return cfg, fmt.Errorf("train: optimizer_config.%s.%s: not an argument of %s (want some of %v)", kind, k, kind, allowed)
		}
	}
	raw, err := json.Marshal(given)
	if err != nil {
		return cfg, fmt.Errorf("train: optimizer_config.%s: %w", kind, err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("train: optimizer_config.%s: %w", kind, err)
	}
	return cfg, nil
}
