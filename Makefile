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

.PHONY: all venv test test-mlx run oracle oracle-check vet clean

all: test

# The project-local virtualenv with the oracle's pinned packages. Re-installed only
# when requirements.txt changes, so the target is fast when already done.
venv: $(STAMP) $(MLXDIR)/lib/libmlx.so
$(STAMP): $(REQS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r $(REQS)
	@touch $(STAMP)

# backend/metal reaches the mlx-cpu wheel's include/ and lib/ through .venv/mlx,
# a path without the Python version in it (cgo flags use ${SRCDIR}/../../.venv/mlx).
$(MLXDIR)/lib/libmlx.so: | $(STAMP)
	@d=$$(cd $(VENV) && ls -d lib/python3*/site-packages/mlx | head -n1); \
	  test -n "$$d" || { echo "no mlx package in $(VENV) (is mlx-cpu installed?)"; exit 1; }; \
	  ln -sfn "$$d" $(MLXDIR)
	@test -f $@ || { echo "$@ missing: the mlx-cpu wheel must provide it"; exit 1; }

# Every test, on every backend. MLXGO_REQUIRE_VENV makes tests that need the
# virtualenv (the oracle, MLX) fail instead of skipping.
test: venv
	$(GO) vet ./...
	$(GO) vet -tags mlx ./...
	MLXGO_REQUIRE_VENV=1 $(GO) test -tags mlx ./...
	$(MAKE) oracle-check

# Only the MLX backend and the conformance suite on it.
test-mlx: venv
	MLXGO_REQUIRE_VENV=1 $(GO) test -tags mlx ./backend/metal/ ./conformance/

# The main job on the embedded default: no download, no flags. It runs on the
# MLX backend too once the virtualenv exists (make venv, or make test).
run:
	@if [ -e $(MLXDIR)/lib/libmlx.so ]; then $(GO) run -tags mlx ./cmd/mlxgo; \
	else echo "mlxgo: MLX not set up here (make venv adds the mlx backend); running the cpu backend"; $(GO) run ./cmd/mlxgo; fi

# Regenerate every fixture from the oracle (mlx_lm, pinned) into the repository.
oracle: venv
	$(VPY) conformance/oracle/generate.py --out conformance/testdata

# Regenerate into a temporary directory and compare with the committed fixtures.
oracle-check: venv
	$(VPY) conformance/oracle/check.py

vet:
	$(GO) vet ./...

clean:
	rm -rf $(VENV) bin
