"""Pack the pinned GPU stack for a node that reaches no package index, in pieces that fit a small
transfer limit; `scripts/gpu_stack_run.sh` unpacks it there and runs the GPU benchmark.

    python scripts/gpu_stack.py --node-packages names.txt --out .gpu     # here, with PyPI
    # copy .gpu/bin and each .gpu/pNN to the node's checkout, then there:
    bash scripts/gpu_stack_run.sh .gpu -- --quick                       # or any gpu_serve arguments

What it packs: Ray RAY_VERSION (Serve, Data, LLM), vLLM VLLM_VERSION and torch TORCH_VERSION, as
serving/versions.py pins them, for the node's Python (`--python`, default 3.12) on x86-64 Linux,
plus the project's own dependencies, installed with `--no-deps` into one folder that goes first
on PYTHONPATH there. Left out: whatever `--node-packages` names (one distribution name per line,
as `pip list` prints them; the node's copies are used) except the engine stack, which always
travels because vLLM's kernels are built against its exact torch; the CUDA libraries, which
torch finds on the node (the node needs the same CUDA major version; NCCL travels, because torch
2.13 calls NCCL 2.29 functions that older NCCLs lack); and optional parts a text model on one
GPU never loads (KV-transfer, video and audio codecs, other GPU makers' backends, SM100 kernels).
First used 2026-11-26 on an H200 whose image had PyTorch 2.11 and no Ray or vLLM (docs/benchmarks.md,
"GPU path"); about 1.1 GB in 20 pieces of 56 MiB then, 0.97 GB in 16 of 59 MiB since the
prune of 2026-11-27.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from serving.versions import IMAGE_PIP, RAY_VERSION, TORCH_VERSION, VLLM_VERSION  # noqa: E402

# Always packed, whatever the node has: vLLM's compiled kernels need this exact torch, torch this
# triton, and Ray Serve LLM this vLLM.
ENGINE = ("torch", "triton", "vllm", "ray", "flashinfer-python", "transformers", "torchvision")
# Never packed: optional parts that a dense text model on one GPU does not import, and the CUDA
# libraries (the node's, except NCCL, below).
SKIP = re.compile(r"^(nixl.*|nvidia-cutlass-dsl-libs-(cu12|cu13|base)|tokenspeed-triton|tilelang|nvidia-nvvm|"
                  r"nvidia-cuda-(nvcc|nvdisasm|cccl|crt)|pynvvideocodec|av|z3-solver|torchcodec|py-spy|hf-transfer|"
                  r"virtualenv|soundfile|soxr|nvidia-(cublas|cudnn-cu13|cufft|cufile|curand|cusolver|cusparse|"
                  r"cusparselt-cu13|nvjitlink|nvshmem-cu13|nvtx|cuda-runtime|cuda-nvrtc|cuda-cupti|nccl-cu13))$")
# Removed after install: headers, kernels for chips other than Hopper-and-older NVIDIA parts, and
# parts a Hopper node never runs: FlashAttention 2 (vLLM prefers FA3 on SM90 and imports FA2 only
# inside a try), the Rust front end (used only when VLLM_RUST_FRONTEND asks), Triton's Blackwell
# ptxas and its CUPTI (the Proton profiler's), Ray's Java jars (Java workers only) and pycountry's
# translations. Triton finds its backends through entry points, so
# the AMD one is taken out of those as well.
PRUNE = ("torch/include", "torch/share", "vllm/third_party/fmha_sm100", "vllm/third_party/deep_gemm",
         "triton/backends/amd", "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm-rs",
         "triton/backends/nvidia/bin/ptxas-blackwell", "triton/backends/nvidia/lib/cupti", "ray/jars",
         "pycountry/locales")
# zstd's long-distance window: 1 GiB, so repeats far apart in the 2.8 GB tar are found; the node's
# decompressor must allow the same (gpu_stack_run.sh). Level 15: 1.5% smaller than 9, 4.4 min on 2 cores.
ZSTD_LONG = 30
NCCL = "nvidia-nccl-cu13"


def canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_name(path: Path) -> str:
    return canon(path.name.split("-")[0])


def select(wheels: list[Path], node_packages: set[str]) -> list[Path]:
    """The wheels that travel: the engine stack always, anything else the node lacks, never SKIP."""
    return [w for w in wheels
            if not SKIP.match(wheel_name(w)) and (wheel_name(w) in ENGINE or wheel_name(w) not in node_packages)]


def prune(site: Path) -> None:
    """Remove PRUNE and the bytecode caches from an installed stack. Triton finds its backends
    through entry points, and one naming a removed folder makes `import triton` fail (torch then
    reports Triton missing), so those lines go too."""
    for rel in PRUNE:
        path = site / rel
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    backends = [Path(r).name for r in PRUNE if Path(r).parent == Path("triton/backends")]
    for ep in site.glob("triton-*.dist-info/entry_points.txt"):
        ep.write_text("".join(ln for ln in ep.read_text().splitlines(True)
                              if not any(f"triton.backends.{b}" in ln for b in backends)))
    for cache in site.rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def platform_args(python: str) -> list[str]:
    tags = [f"manylinux_2_{n}_x86_64" for n in range(5, 40)] + ["manylinux2014_x86_64", "manylinux2010_x86_64",
                                                                  "manylinux1_x86_64", "linux_x86_64"]
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp",
            *[a for t in tags for a in ("--platform", t)]]


def pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", *args], check=True)


def build(out: Path, python: str, node_packages: set[str], chunk: int, work: Path) -> list[Path]:
    wheels, site = work / "wheels", work / "site"
    pip("download", "-q", *platform_args(python), "-d", str(wheels), f"vllm=={VLLM_VERSION}",
        f"ray[llm,serve,data]=={RAY_VERSION}", f"torch=={TORCH_VERSION}")
    # The project's own dependencies (and theirs): the node's wheel where PyPI has one, else
    # (pure-Python sources only) a wheel built here.
    for req in (*IMAGE_PIP, "antlr4-python3-runtime==4.9.3", "omegaconf==2.3.0", "pyphen", "nltk"):
        try:
            pip("download", "-q", "--no-deps", *platform_args(python), "-d", str(wheels), req)
        except subprocess.CalledProcessError:
            pip("wheel", "-q", "--no-deps", "-w", str(wheels), req)
    chosen = select(sorted(wheels.glob("*.whl")), node_packages)
    pip("install", "-q", "--no-deps", "--no-compile", "--target", str(site), *platform_args(python),
        *map(str, chosen))
    nccl = next(wheels.glob("nvidia_nccl_cu13-*.whl"))
    subprocess.run(["unzip", "-q", "-o", str(nccl), "nvidia/nccl/lib/*", "-d", str(site)], check=True)
    prune(site)
    packed = work / "site.tar.zst"
    subprocess.run(f"tar -C {site} -cf - . | zstd -q -15 -T0 --long={ZSTD_LONG} -f -o {packed}", shell=True, check=True)
    return split(packed, out, chunk, python)


def split(packed: Path, out: Path, chunk: int, python: str = "3.12") -> list[Path]:
    """`packed` cut into `out`/pNN/site.NN of `chunk` bytes (one a trip), with its checksum and
    the zstandard wheel (for a node without the zstd tool) in `out`/bin."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bin").mkdir(exist_ok=True)
    if not any((out / "bin").glob("zstandard-*.whl")):
        pip("download", "-q", "--no-deps", *platform_args(python), "-d", str(out / "bin"), "zstandard")
    digest = hashlib.sha256()
    pieces = []
    with packed.open("rb") as f:
        for i, data in enumerate(iter(lambda: f.read(chunk), b"")):
            digest.update(data)
            d = out / f"p{i:02d}"
            d.mkdir(exist_ok=True)
            (d / f"site.{i:02d}").write_bytes(data)
            pieces.append(d)
    (out / "bin" / "site.sha256").write_text(digest.hexdigest() + "\n")
    return pieces


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python scripts/gpu_stack.py", description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, required=True, help="folder for bin/ and the pieces pNN/")
    p.add_argument("--python", default="3.12", help="the node's Python, major.minor (default 3.12)")
    p.add_argument("--node-packages", type=Path, help="distribution names the node already has, one a line")
    p.add_argument("--chunk-mib", type=int, default=59, help="size of each piece (default 59 MiB: with the project (~4 MB) it fits a 64 MiB trip)")
    args = p.parse_args(argv)
    names: set[str] = set()
    if args.node_packages:
        names = {canon(ln.split()[0].split("==")[0]) for ln in args.node_packages.read_text().splitlines()
                 if ln.strip() and not ln.startswith(("#", "Package", "---"))}
    for tool in ("zstd", "unzip", "tar"):
        if shutil.which(tool) is None:
            print(f"error: {tool} is not installed here", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory() as tmp:
        pieces = build(args.out, args.python, names, args.chunk_mib << 20, Path(tmp))
    total = sum(f.stat().st_size for d in pieces for f in d.iterdir())
    print(f"{len(pieces)} pieces, {total / 2**20:,.0f} MiB, in {args.out}/p00..p{len(pieces) - 1:02d}; "
          f"zstandard and the checksum in {args.out}/bin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
