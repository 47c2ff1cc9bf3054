#!/usr/bin/env bash
# The node's half of scripts/gpu_stack.py: gather the pieces, unpack the stack, run the GPU benchmark.
#   bash scripts/gpu_stack_run.sh stage DIR              # move the pieces now in DIR/pNN to the staging folder
#   bash scripts/gpu_stack_run.sh run DIR [ARGS...]      # stage the rest, check, unpack, run benchmarks.gpu_serve ARGS
# A transfer that carries one piece a trip runs `stage` after each; GPU_STACK_STAGE (default
# /tmp/gpu-stack) must outlive the trips, GPU_STACK_SITE (default /tmp/gpu-site) receives the stack.
set -euo pipefail
mode=${1:?usage: gpu_stack_run.sh stage|run DIR [ARGS...]}; dir=${2:?the folder gpu_stack.py wrote}; shift 2
stage=${GPU_STACK_STAGE:-/tmp/gpu-stack}; site=${GPU_STACK_SITE:-/tmp/gpu-site}
mkdir -p "$stage"
for d in "$dir"/p[0-9][0-9]; do [ -d "$d" ] && mv -f "$d"/* "$stage"/ && rmdir "$d"; done
echo "staged: $(ls "$stage" | wc -l) pieces, $(du -sh "$stage" | cut -f1)"
[ "$mode" = run ] || exit 0
have=$(cat "$stage"/site.* | sha256sum | cut -c1-64)
[ "$have" = "$(cut -c1-64 "$dir/bin/site.sha256")" ] || { echo "error: the pieces in $stage do not add up to the packed stack (a piece is missing or damaged)"; exit 3; }
mkdir -p "$site"
if command -v zstd >/dev/null; then
  cat "$stage"/site.* | zstd -d -q --long=30 | tar -x -C "$site"
else  # the node's Python with the zstandard wheel that came in bin/
  zs=$(mktemp -d)
  python3 -c "import glob, sys, zipfile; zipfile.ZipFile(glob.glob(sys.argv[1] + '/zstandard-*.whl')[0]).extractall(sys.argv[2])" "$dir/bin" "$zs"
  cat "$stage"/site.* | PYTHONPATH=$zs python3 -c "import sys, zstandard; zstandard.ZstdDecompressor(max_window_size=2**30).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" | tar -x -C "$site"
fi
# The node's cuDNN may be a minor version older than the one torch was built with; a text model
# never calls cuDNN, and torch would otherwise refuse at its first check. Nothing may reach a hub.
export PYTHONPATH=$site:$PWD PYTORCH_SKIP_CUDNN_COMPATIBILITY_CHECK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 RAY_USAGE_STATS_ENABLED=0 PYTHONUNBUFFERED=1
python3 -c "import torch, vllm, ray; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'vllm', vllm.__version__, 'ray', ray.__version__)"
exec python3 -m benchmarks.gpu_serve "$@"
