"""scripts/gpu_stack.py's choice of what travels to an offline GPU node (no download here)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.conftest import ROOT

spec = importlib.util.spec_from_file_location("gpu_stack", ROOT / "scripts" / "gpu_stack.py")
gpu_stack = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gpu_stack)


def test_the_engine_stack_always_travels_the_rest_only_where_the_node_lacks_it():
    # The H200 of 2026-11-26: torch, triton and transformers were there in other versions,
    # numpy and pandas were there, pydantic and fastapi were not.
    names = ["torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl", "triton-3.7.1-cp312-cp312-manylinux_2_28_x86_64.whl",
             "vllm-0.29.0-cp38-abi3-manylinux_2_28_x86_64.whl", "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl",
             "transformers-5.24.0-py3-none-any.whl", "numpy-2.3.5-cp312-cp312-manylinux_2_28_x86_64.whl",
             "pandas-3.1.1-cp312-cp312-manylinux_2_28_x86_64.whl", "pydantic-2.14.4-py3-none-any.whl",
             "fastapi-0.136.3-py3-none-any.whl", "nixl_cu12-1.3.2-cp312-cp312-manylinux_2_28_x86_64.whl",
             "nvidia_cublas-13.1.1.3-py3-none-manylinux_2_27_x86_64.whl",
             "nvidia_nccl_cu13-2.29.7-py3-none-manylinux_2_18_x86_64.whl",
             "nvidia_cutlass_dsl_libs_cu13-4.6.2-cp312-cp312-manylinux_2_28_x86_64.whl",
             "tilelang-0.1.12-cp38-abi3-manylinux_2_28_x86_64.whl", "xgrammar-0.2.8-cp312-cp312-manylinux_2_28_x86_64.whl"]
    node = {"torch", "triton", "transformers", "numpy", "pandas", "nvidia-cublas", "nvidia-nccl-cu13"}
    chosen = {p.name.split("-")[0] for p in gpu_stack.select([Path(n) for n in names], node)}
    assert chosen == {"torch", "triton", "vllm", "ray", "transformers", "pydantic", "fastapi", "xgrammar"}
    # NCCL travels, but as its library only (unpacked into the stack by build), never as a wheel
    # that would put a second `nvidia` package next to the node's.
    assert gpu_stack.SKIP.match("nvidia-nccl-cu13") and gpu_stack.NCCL == "nvidia-nccl-cu13"


def test_a_pruned_triton_backend_leaves_triton_entry_points_too(tmp_path):
    # Pruning a backend folder but leaving its entry point made torch report Triton missing on the
    # GPU node (`No module named 'triton.backends.amd'`).
    info = tmp_path / "triton-3.7.1.dist-info"
    (tmp_path / "triton" / "backends" / "amd").mkdir(parents=True)
    (tmp_path / "triton" / "backends" / "nvidia").mkdir(parents=True)
    (tmp_path / "torch" / "include").mkdir(parents=True)
    (tmp_path / "torch" / "lib").mkdir(parents=True)
    info.mkdir()
    (info / "entry_points.txt").write_text("[triton.backends]\namd = triton.backends.amd\nnvidia = triton.backends.nvidia\n")
    gpu_stack.prune(tmp_path)
    assert (info / "entry_points.txt").read_text() == "[triton.backends]\nnvidia = triton.backends.nvidia\n"
    assert not (tmp_path / "triton" / "backends" / "amd").exists() and (tmp_path / "triton" / "backends" / "nvidia").exists()
    assert not (tmp_path / "torch" / "include").exists() and (tmp_path / "torch" / "lib").exists()


def test_pruned_files_go_and_what_a_hopper_node_runs_stays(tmp_path):
    # FlashAttention 2's library is a file, not a folder: rmtree alone left it (and its 294 MB).
    fa = tmp_path / "vllm" / "vllm_flash_attn"
    fa.mkdir(parents=True)
    for name in ("_vllm_fa2_C.abi3.so", "_vllm_fa3_C.abi3.so", "flash_attn_interface.py"):
        (fa / name).write_bytes(b"x")
    nv = tmp_path / "triton" / "backends" / "nvidia"
    (nv / "bin").mkdir(parents=True)
    (nv / "lib" / "cupti").mkdir(parents=True)
    for name in ("bin/ptxas", "bin/ptxas-blackwell", "lib/libdevice.10.bc", "lib/cupti/libcupti.so"):
        (nv / name).write_bytes(b"x")
    info = tmp_path / "triton-3.7.1.dist-info"
    info.mkdir()
    entry = "[triton.backends]\nnvidia = triton.backends.nvidia\n"
    (info / "entry_points.txt").write_text(entry)
    gpu_stack.prune(tmp_path)
    assert sorted(p.name for p in fa.iterdir()) == ["_vllm_fa3_C.abi3.so", "flash_attn_interface.py"]
    assert sorted(str(p.relative_to(nv)) for p in nv.rglob("*") if p.is_file()) == ["bin/ptxas", "lib/libdevice.10.bc"]
    assert (info / "entry_points.txt").read_text() == entry  # nvidia's own entry point stays


def test_split_pieces_add_up_to_the_packed_file_and_its_checksum(tmp_path):
    import hashlib

    data = bytes(range(256)) * 41  # 10,496 bytes: four pieces of 3,000 and one of 1,496
    packed = tmp_path / "site.tar.zst"
    packed.write_bytes(data)
    out = tmp_path / "out"
    (out / "bin").mkdir(parents=True)
    (out / "bin" / "zstandard-0.25.0-cp312-cp312-manylinux2014_x86_64.whl").write_bytes(b"")  # no download
    pieces = gpu_stack.split(packed, out, 3000)
    assert [p.name for p in pieces] == ["p00", "p01", "p02", "p03"]
    sizes = [(p / f"site.{p.name[1:]}").stat().st_size for p in pieces]
    assert sizes == [3000, 3000, 3000, 1496]
    assert b"".join((p / f"site.{p.name[1:]}").read_bytes() for p in pieces) == data
    assert (out / "bin" / "site.sha256").read_text() == hashlib.sha256(data).hexdigest() + "\n"
