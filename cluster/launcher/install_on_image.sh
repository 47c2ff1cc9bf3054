#!/usr/bin/env bash
# Install the project on a node that runs Ray's LLM image, without replacing the image's engine.
#
#   bash cluster/launcher/install_on_image.sh        # from the repository root, in the container
#
# The image (serving/versions.py: RAY_LLM_IMAGE) has Ray, ray.serve.llm, the vLLM that Ray pins
# (VLLM_VERSION), its torch and CUDA. `pip install -e ".[gpu]"` would re-resolve all of them;
# instead:
#   1. the project itself, editable, with --no-deps;
#   2. what the image lacks (serving/versions.py: IMAGE_PIP), under constraints that hold every
#      engine-stack package (ENGINE_STACK) at the version the image has: if one of our
#      requirements needed another version, pip stops here with the conflict instead of
#      replacing it;
#   3. a check that Ray and vLLM are the versions serving/versions.py states, so a node on
#      another image fails at setup, not at the first request.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PY="${PYTHON:-python}"
PINS="$(mktemp)"
trap 'rm -f "$PINS"' EXIT

"$PY" -m pip install --no-deps -e .
"$PY" - "$PINS" <<'PYEOF'
import sys
from importlib import metadata

from serving.versions import ENGINE_STACK

lines = []
for name in ENGINE_STACK:
    try:
        lines.append(f"{name}=={metadata.version(name)}")
    except metadata.PackageNotFoundError:
        pass  # not in this image: nothing to hold
open(sys.argv[1], "w").write("\n".join(lines) + "\n")
print("holding the image's engine stack:", ", ".join(lines))
PYEOF
"$PY" -c "from serving.versions import IMAGE_PIP; print('\n'.join(IMAGE_PIP))" > "$PINS.req"
"$PY" -m pip install -c "$PINS" -r "$PINS.req"
rm -f "$PINS.req"
"$PY" - <<'PYEOF'
import ray
import vllm

from serving.versions import RAY_LLM_IMAGE, RAY_VERSION, VLLM_VERSION

found = (ray.__version__, vllm.__version__)
if found != (RAY_VERSION, VLLM_VERSION):
    raise SystemExit(f"this node has Ray {found[0]} / vLLM {found[1]}; the project is pinned to Ray "
                     f"{RAY_VERSION} / vLLM {VLLM_VERSION} (image {RAY_LLM_IMAGE})")
print(f"ok: Ray {ray.__version__}, vLLM {vllm.__version__}")
PYEOF
