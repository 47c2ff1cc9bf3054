"""ctypes declarations of llama.cpp's training API, for the CPU fine-tune's worker.

`make setup` builds llama.cpp's shared libraries into llama-cpp-python's `llama_cpp/lib/`
(scripts/build_llama_cpp.sh); they hold the whole training path that llama.cpp's
`examples/training/finetune.cpp` drives (`llama_opt_init`, `llama_opt_epoch`, the `ggml_opt_*`
dataset and result objects), so the worker calls them directly and no training binary is built.
llama-cpp-python declares `llama_opt_params` without its last field (`optimizer_type`, added to
llama.h after its bindings were written), so that struct, and the `ggml_opt_*` functions it
does not declare at all, are declared here, from the vendored `include/llama.h` and
`ggml/include/ggml-opt.h` of the pinned llama.cpp (Makefile's LLAMA_CPP_PYTHON).

Imported only by the worker process (it loads llama.cpp's libraries).
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

import llama_cpp.llama_cpp as llama  # the bindings, and `_lib`: libllama as loaded by them

GGML_TYPE_I32 = 26            # ggml.h enum ggml_type
OPTIMIZER_ADAMW = 0           # ggml-opt.h enum ggml_opt_optimizer_type
LOAD_MODE_NONE = 0            # llama.h enum llama_load_mode: weights in writable memory (no mmap)
FLASH_ATTN_DISABLED = 0       # llama.h: FLASH_ATTN_EXT has no backward pass
# llama.h enum llama_ftype: the GGUF types a fine-tune is read in (f32) and may be served in.
FTYPES = {"f32": 0, "f16": 1, "q8_0": 7, "q4_k_m": 15}


class AdamW(ctypes.Structure):
    _fields_ = [("alpha", ctypes.c_float), ("beta1", ctypes.c_float), ("beta2", ctypes.c_float),
                ("eps", ctypes.c_float), ("wd", ctypes.c_float)]


class SGD(ctypes.Structure):
    _fields_ = [("alpha", ctypes.c_float), ("wd", ctypes.c_float)]


class OptimizerParams(ctypes.Structure):
    """struct ggml_opt_optimizer_params."""
    _fields_ = [("adamw", AdamW), ("sgd", SGD)]


class OptParams(ctypes.Structure):
    """struct llama_opt_params (llama.h), with `optimizer_type`."""
    _fields_ = [("n_ctx_train", ctypes.c_uint32), ("param_filter", ctypes.c_void_p),
                ("param_filter_ud", ctypes.c_void_p), ("get_opt_pars", ctypes.c_void_p),
                ("get_opt_pars_ud", ctypes.c_void_p), ("optimizer_type", ctypes.c_int)]


# typedef void (*ggml_opt_epoch_callback)(bool train, ggml_opt_context_t, ggml_opt_dataset_t,
#     ggml_opt_result_t result, int64_t ibatch, int64_t ibatch_max, int64_t t_start_us);
EpochCallback = ctypes.CFUNCTYPE(None, ctypes.c_bool, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                 ctypes.c_int64, ctypes.c_int64, ctypes.c_int64)

_P = ctypes.c_void_p


def _declare(lib: Any, name: str, args: list[Any], res: Any = None) -> Any:
    fn = getattr(lib, name)
    fn.argtypes, fn.restype = args, res
    return fn


class Libs:
    """libllama (as llama-cpp-python loaded it) and libggml-base beside it, with the training
    functions declared."""

    def __init__(self) -> None:
        lib_dir = os.path.dirname(llama._lib._name) if os.path.isabs(llama._lib._name) else os.path.join(
            os.path.dirname(llama.__file__), "lib")
        ggml = ctypes.CDLL(os.path.join(lib_dir, "libggml-base.so"))
        lib = llama._lib
        self.opt_init = _declare(lib, "llama_opt_init", [_P, _P, OptParams])
        self.opt_epoch = _declare(lib, "llama_opt_epoch", [_P, _P, _P, _P, ctypes.c_int64, _P, _P])
        self.param_filter_all = ctypes.cast(lib.llama_opt_param_filter_all, _P)
        self.constant_params = ctypes.cast(ggml.ggml_opt_get_constant_optimizer_params, _P)
        self.dataset_init = _declare(ggml, "ggml_opt_dataset_init", [ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                                                     ctypes.c_int64, ctypes.c_int64, ctypes.c_int64], _P)
        self.dataset_free = _declare(ggml, "ggml_opt_dataset_free", [_P])
        self.dataset_data = _declare(ggml, "ggml_opt_dataset_data", [_P], _P)
        self.dataset_labels = _declare(ggml, "ggml_opt_dataset_labels", [_P], _P)
        self.tensor_data = _declare(ggml, "ggml_get_data", [_P], _P)
        self.result_init = _declare(ggml, "ggml_opt_result_init", [], _P)
        self.result_free = _declare(ggml, "ggml_opt_result_free", [_P])
        self.result_loss = _declare(ggml, "ggml_opt_result_loss",
                                    [_P, ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)])

    def dataset(self, inputs: list[list[int]], labels: list[list[int]]) -> Any:
        """A ggml_opt dataset of one window per step (int32 token ids, labels the next tokens)."""
        n, width = len(inputs), len(inputs[0])
        ds = self.dataset_init(GGML_TYPE_I32, GGML_TYPE_I32, width, width, n, 1)
        for tensor, rows in ((self.dataset_data(ds), inputs), (self.dataset_labels(ds), labels)):
            flat = (ctypes.c_int32 * (n * width)).from_address(self.tensor_data(tensor))
            flat[:] = [t for row in rows for t in row]
        return ds

    def mean_loss(self, result: Any) -> float:
        loss, unc = ctypes.c_double(), ctypes.c_double()
        self.result_loss(result, ctypes.byref(loss), ctypes.byref(unc))
        return loss.value


def quiet_logs() -> Any:
    """Silence llama.cpp's log (thousands of lines per model load); its aborts still reach stderr.
    Returns the callback, which must be kept alive."""
    cb = llama.llama_log_callback(lambda level, text, user_data: None)
    llama.llama_log_set(cb, None)
    return cb


def convert(src: str, dst: str, ftype: str, threads: int) -> None:
    """Write `src` as GGUF type `ftype` to `dst` (llama.cpp's quantizer; from a quantized source
    the weights are dequantized first: `allow_requantize`)."""
    params = llama.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = threads
    tmp = f"{dst}.tmp"
    rc = llama.llama_model_quantize(src.encode(), tmp.encode(), ctypes.byref(params))
    if rc != 0:
        raise RuntimeError(f"llama.cpp could not convert {src} to {ftype} (code {rc})")
    os.replace(tmp, dst)
