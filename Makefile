# Strata: `make demo` runs the whole pipeline on the built-in demo dataset; `make test` runs the tests.
# Both create .venv and install everything on a fresh machine.

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.strata-installed
ROOT   ?= strata_data
# torch 2.13.0's CPU wheel is installed first, on its own: a bare `torch` requirement would pull the
# newest CUDA build (several GB). Any torch >= 2.3 works; set TORCH_SPEC to choose another.
TORCH_SPEC ?= torch==2.13.0

.PHONY: install demo test test-all test-asan test-web lint bench ui web-runtime web-screenshot clean

$(STAMP): pyproject.toml setup.py
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/strata run --dataset demo --root $(ROOT)

test: install
	$(BIN)/python -m pytest -q

test-all: install
	$(BIN)/python -m pytest -q -m "not gpu or gpu"

# The C extension built with ASan + UBSan in a temp copy of the tree (the in-place .so is untouched): its tests
# and four end-to-end runs on tiny under LD_PRELOAD=libasan; any sanitizer report fails (.ci/asan).
test-asan: install
	PYTHON=$(BIN)/python .ci/asan

# onnxruntime-web (the version pipelines/web/app.py pins) into Strata's npm cache: `strata export --web DIR`
# copies it into DIR/ort/ so the folder works offline.
NPM_CACHE ?= $(HOME)/.cache/strata/npm
ORT_WEB_VERSION := $(shell sed -n 's/^ORT_WEB_VERSION = "\(.*\)"/\1/p' pipelines/web/app.py)

web-runtime:
	npm install --prefix $(NPM_CACHE) --no-audit --no-fund onnxruntime-web@$(ORT_WEB_VERSION)

test-web: install web-runtime
	$(BIN)/python -m pytest -q -m web

# The demo's browser app, deployed to $(ROOT)/web and photographed in headless Chromium.
web-screenshot: install web-runtime
	$(BIN)/strata export --dataset demo --root $(ROOT) --web $(ROOT)/web --screenshot $(ROOT)/web.png

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

bench: install
	$(BIN)/strata bench --dataset demo --root $(ROOT) --set train.epochs=3 --memory-budget 25M --timeout 600 \
		--out benchmarks/results/demo.json

ui: install
	$(BIN)/strata ui --root $(ROOT)

clean:
	rm -rf build *.egg-info storage_kernels/*.so .pytest_cache
