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
LLAMA_CPP_PYTHON := 0.3.36
# llama.cpp, built once for both CPU engines (scripts/build_llama_cpp.sh): llama-server, the
# batching engine, into .venv/bin/, and the shared libraries that llama-cpp-python's in-process
# engine loads, into its llama_cpp/lib/ (the bindings installed without their own build), from the
# llama.cpp that llama-cpp-python vendors with our patches (scripts/llama-server-patches/).
LLAMA_SERVER := $(VENV)/bin/llama-server

.PHONY: demo test setup clean-venv bench bench-gpu

$(PY):
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found (Python 3.11 is required)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(LLAMA_SERVER): scripts/build_llama_cpp.sh scripts/llama-cpp-unity.cmake $(wildcard scripts/llama-server-patches/*.patch) | $(PY)
	LLAMA_CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" bash scripts/build_llama_cpp.sh $(PY) $(LLAMA_CPP_PYTHON) $@

# The project and its other dependencies (pyproject's llama-cpp-python pin is already met).
$(STAMP): pyproject.toml $(LLAMA_SERVER)
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

setup: $(STAMP) $(LLAMA_SERVER)

demo: $(STAMP) $(LLAMA_SERVER)
	@# The three demo pipelines on one embedded cluster and one model server (jobs/demo.py).
	$(PY) -m jobs.demo $(ARGS)
	@echo "Rate the MentalBench demo's answers in the browser, blinded (each rater's link is printed; Ctrl-C stops it):"
	@echo "  $(PY) -m jobs.rate run_dir=$$(ls -td runs/mentalbench_demo/2*/ 2>/dev/null | head -1 | sed 's:/$$::') raters=[ana,ben] per_subject=2"

# The report test renders report.html in headless Chromium (Debian's package; apt needs root).
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	@command -v apt-get >/dev/null || { echo "error: install Chromium at $(CHROMIUM) (used by the report test)"; exit 1; }
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

# With no ARGS: the integration tests, one at a time (they start clusters and share the model
# server and the cores), then the unit tests over two processes (pytest-xdist: CPU-bound, no
# Ray). Both always run; the first failure's code is kept. ARGS: one pytest run of what it names.
test: $(STAMP) $(LLAMA_SERVER) $(CHROMIUM)
ifeq ($(strip $(ARGS)),)
	@rc=0; $(PY) -m pytest tests/integration || rc=$$?; \
	$(PY) -m pytest -n 2 tests --ignore=tests/integration || { b=$$?; [ $$rc -ne 0 ] || rc=$$b; }; exit $$rc
else
	$(PY) -m pytest $(ARGS)
endif

bench: $(STAMP) $(LLAMA_SERVER)
	$(PY) -m benchmarks.throughput
	$(PY) -m benchmarks.serve_vs_engine
	$(PY) -m benchmarks.dialogue_concurrency

# One GPU, one command (README, "On GPUs"): a separate .venv-gpu with the vLLM that Ray pins
# (ray[llm] at serving/versions.py's RAY_VERSION) and the project installed over it without
# replacing it (cluster/launcher/install_on_image.sh), then benchmarks/gpu_serve.py, which writes
# docs/benchmarks/gpu_serve-<GPU>-<time>.json. ARGS='--quick' for a smoke run.
# PyPI's torch is the CUDA 13.0 build (NVIDIA driver 580+); with an older driver, take the
# CUDA 12.8 build first: make bench-gpu TORCH_INDEX=https://download.pytorch.org/whl/cu128
VENV_GPU := .venv-gpu
RAY_VERSION := $(shell sed -n 's/^RAY_VERSION = "\(.*\)"/\1/p' serving/versions.py)
TORCH_VERSION := $(shell sed -n 's/^TORCH_VERSION = "\(.*\)"/\1/p' serving/versions.py)
TORCH_INDEX ?=
bench-gpu:
	@command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { echo "error: make bench-gpu needs an NVIDIA GPU (nvidia-smi finds none)"; exit 2; }
	@test -x $(VENV_GPU)/bin/python || $(PYTHON) -m venv $(VENV_GPU)
	@# Offline (PIP_NO_INDEX=1 with a wheelhouse in PIP_FIND_LINKS): keep the venv's own pip.
	$(if $(PIP_NO_INDEX),,$(VENV_GPU)/bin/python -m pip install -q --upgrade pip)
	$(if $(TORCH_INDEX),$(VENV_GPU)/bin/python -m pip install -q "torch==$(TORCH_VERSION)" --index-url $(TORCH_INDEX))
	$(VENV_GPU)/bin/python -m pip install -q "ray[llm,serve,data]==$(RAY_VERSION)"
	PYTHON=$(VENV_GPU)/bin/python bash cluster/launcher/install_on_image.sh
	$(VENV_GPU)/bin/python -m benchmarks.gpu_serve $(ARGS)

clean-venv:
	rm -rf $(VENV)
