# mlxgo Makefile. Targets install what they need: a fresh machine needs only Go,
# Python 3.11 and a network path to PyPI and the Go module proxy.

SHELL := /bin/bash
GO ?= go
PYTHON ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
REQS := conformance/oracle/requirements.txt
STAMP := $(VENV)/.installed

.PHONY: all venv test run oracle oracle-check vet clean

all: test

# The project-local virtualenv with the oracle's pinned packages. Re-installed only
# when requirements.txt changes, so the target is fast when already done.
venv: $(STAMP)
$(STAMP): $(REQS)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --disable-pip-version-check -r $(REQS)
	@touch $(STAMP)

# Every test. MLXGO_REQUIRE_VENV makes tests that need the virtualenv fail instead of skipping.
test: venv
	$(GO) vet ./...
	MLXGO_REQUIRE_VENV=1 $(GO) test ./...
	$(MAKE) oracle-check

# The main job on the embedded default.
run:
	$(GO) run ./cmd/mlxgo

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
