# Two commands (see README):
#   make demo   set up .venv (first time) and run the main job on the embedded default
#   make test   set up .venv (first time) and run the test suite
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
# Portable llama.cpp build: never -march=native (AMX segfaults on the first decode on some Xeons).
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
STAMP := $(VENV)/.installed

.PHONY: demo test setup clean-venv bench

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@# llama-cpp-python builds from source (~7-15 min on 2 cores, once; pip caches the wheel).
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip install -q llama-cpp-python==0.3.36
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP)

demo: $(STAMP)
	$(PY) -m jobs.pipeline experiment=mentalbench_demo $(ARGS)
	$(PY) -m jobs.pipeline experiment=sqpsych_demo $(ARGS)
	$(PY) -m jobs.pipeline experiment=arena_demo $(ARGS)

# The report test renders report.html in headless Chromium (Debian's package; apt needs root).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "error: install Chromium at $(CHROMIUM) (used by the report test)"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest $(ARGS)

bench: $(STAMP)
	$(PY) -m benchmarks.throughput
	$(PY) -m benchmarks.serve_vs_engine
	$(PY) -m benchmarks.dialogue_concurrency

clean-venv:
	rm -rf $(VENV)
