"""The CPU fine-tune's worker process: `python -m jobs.finetune.cpu_worker SPEC.json`.

A full fine-tune of a GGUF model with llama.cpp's own training path, as its
`examples/training/finetune.cpp` runs it (AdamW over every weight, F32, flash attention off, the
KV cache in F32), driven from here through `jobs.finetune.ggml_opt`:

1. the base GGUF is converted to F32 once (`base_f32`, a cache: llama.cpp trains F32 weights only);
2. the portion's records (`records`, the JSONL `jobs.finetune.data` wrote) are rendered by the
   chat template, tokenized and cut into windows of `n_ctx` tokens (`jobs.finetune.cpu_data`);
3. one optimizer step per window, in the run's step order; after each step its loss and learning
   rate go to stdout as one line `@finetune {...}` (the parent parses those lines; llama.cpp's
   own log is silenced), and every `save_steps` the weights and the losses so far are saved
   (`checkpoint.gguf`, `checkpoint.json`); a run started again with the same spec resumes there.
   llama.cpp saves no optimizer state: a resumed run restarts AdamW's moments (and its bias
   correction) at the checkpoint, so it ends near, not exactly at, an uninterrupted run's loss;
4. the fine-tuned weights are written as GGUF of type `serve_type` (`model.gguf`), the file the
   model file's `source` names, with the base's context length (llama.cpp saves the training
   window there); the F32 copy and the checkpoint are then removed.

It runs in its own process so that an abort inside llama.cpp (a GGML_ASSERT: a model whose
layers have no backward pass, such as Gemma-3's GEGLU) is a failed fine-tune with its message,
never a dead job.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from jobs.finetune import ggml_opt
from jobs.finetune.gguf_meta import context_length, set_context_length
from jobs.finetune.cpu_data import (
    CHECKPOINT, CHECKPOINT_STATE, EVENT_PREFIX, MODEL, chat_text, learning_rate, step_order, windows,
)
# What a checkpoint must share with the run that resumes from it.
RESUME_KEYS = ("base", "records", "chat_template", "n_ctx", "epochs", "max_steps", "learning_rate", "lr_scheduler",
               "warmup_ratio", "weight_decay", "seed")


def emit(event: str, **fields: Any) -> None:
    print(EVENT_PREFIX + json.dumps({"event": event, **fields}), flush=True)


def spec_key(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps({k: spec.get(k) for k in RESUME_KEYS}, sort_keys=True).encode()).hexdigest()[:16]


def read_records(path: str) -> list[list[dict[str, str]]]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, start=1):
            if line.strip():
                rec = json.loads(line)
                if not isinstance(rec.get("messages"), list):
                    raise ValueError(f"{path} line {n}: no messages list")
                out.append(rec["messages"])
    if not out:
        raise ValueError(f"{path}: no record to train on")
    return out


def tokenize(llama: Any, vocab: Any, text: str) -> list[int]:
    data = text.encode("utf-8")
    cap = len(data) + 16
    buf = (llama.llama_token * cap)()
    n = llama.llama_tokenize(vocab, data, len(data), buf, cap, True, True)  # BOS; special tokens parsed
    if n < 0:
        raise RuntimeError(f"tokenizer needs {-n} slots for a text of {len(data)} bytes")
    return list(buf[:n])


def load(llama: Any, path: str, n_ctx: int, threads: int) -> tuple[Any, Any]:
    mp = llama.llama_model_default_params()
    mp.load_mode = ggml_opt.LOAD_MODE_NONE  # the optimizer writes the weights in place
    model = llama.llama_model_load_from_file(path.encode(), mp)
    if not model:
        raise RuntimeError(f"llama.cpp could not load {path}")
    cp = llama.llama_context_default_params()
    cp.n_ctx = cp.n_batch = cp.n_ubatch = n_ctx
    cp.n_threads = cp.n_threads_batch = threads
    cp.flash_attn_type = ggml_opt.FLASH_ATTN_DISABLED
    cp.type_k = cp.type_v = 0  # GGML_TYPE_F32: OUT_PROD has no F16 backward (finetune.cpp forces the same)
    ctx = llama.llama_init_from_model(model, cp)
    if not ctx:
        raise RuntimeError(f"llama.cpp could not make a context of {n_ctx} tokens for {path}")
    if llama.llama_n_ctx(ctx) != n_ctx:
        raise ValueError(f"n_ctx {n_ctx}: llama.cpp made a context of {llama.llama_n_ctx(ctx)} tokens "
                         "(it pads to a multiple of 256): use a multiple of 256")
    return model, ctx


def train(spec: dict[str, Any]) -> None:
    llama = ggml_opt.llama
    keep = ggml_opt.quiet_logs()  # noqa: F841 - the callback must outlive every llama.cpp call
    llama.llama_backend_init()
    libs = ggml_opt.Libs()
    out = Path(spec["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    threads, n_ctx = int(spec["threads"]), int(spec["n_ctx"])
    if not os.path.isfile(spec["base_f32"]):
        started = time.perf_counter()
        Path(spec["base_f32"]).parent.mkdir(parents=True, exist_ok=True)
        ggml_opt.convert(spec["base"], spec["base_f32"], "f32", threads)
        emit("converted", path=spec["base_f32"], seconds=round(time.perf_counter() - started, 2))

    state_path, key = out / CHECKPOINT_STATE, spec_key(spec)
    state = json.loads(state_path.read_text()) if state_path.is_file() and (out / CHECKPOINT).is_file() else None
    if state is not None and state.get("key") != key:
        emit("restart", reason="the checkpoint was made with other data or settings")
        state = None
    done, losses = (state["step"], state["losses"]) if state else (0, [])
    model, ctx = load(llama, str(out / CHECKPOINT) if state else spec["base_f32"], n_ctx, threads)
    vocab = llama.llama_model_get_vocab(model)
    tokens: list[int] = []
    dialogues = read_records(spec["records"])
    for messages in dialogues:
        tokens += tokenize(llama, vocab, chat_text(messages, spec["chat_template"]))
    wins, dropped = windows(tokens, n_ctx)
    order = step_order(len(wins), float(spec["epochs"]), int(spec["seed"]), spec.get("max_steps"))
    total = len(order)
    emit("plan", dialogues=len(dialogues), tokens=len(tokens), windows=len(wins), dropped_tokens=dropped,
         steps=total, n_ctx=n_ctx, resumed_at=done, losses=losses)
    if done >= total:
        raise ValueError(f"the checkpoint is at step {done} of {total}: nothing left to train")

    peak, sched, warm = float(spec["learning_rate"]), spec["lr_scheduler"], float(spec["warmup_ratio"])
    pars = ggml_opt.OptimizerParams(ggml_opt.AdamW(learning_rate(done + 1, total, peak, sched, warm), 0.9, 0.999,
                                                   1e-8, float(spec["weight_decay"])), ggml_opt.SGD(0.0, 0.0))
    libs.opt_init(ctx, model, ggml_opt.OptParams(0, libs.param_filter_all, None, libs.constant_params,
                                                 ctypes.cast(ctypes.pointer(pars), ctypes.c_void_p),
                                                 ggml_opt.OPTIMIZER_ADAMW))
    todo = order[done:]
    dataset = libs.dataset([wins[i][0] for i in todo], [wins[i][1] for i in todo])
    result = libs.result_init()
    clock = {"prev_mean": 0.0, "t": time.perf_counter(), "start": time.perf_counter(), "cpu": time.process_time()}
    save_steps, crash_at = int(spec["save_steps"]), spec.get("crash_at_step")

    def on_step(train_: bool, opt_ctx: Any, ds: Any, res: Any, ibatch: int, ibatch_max: int, t0: int) -> None:
        mean = libs.mean_loss(res)
        loss = ibatch * mean - (ibatch - 1) * clock["prev_mean"]  # ggml keeps the epoch's running mean
        clock["prev_mean"] = mean
        step, now = done + ibatch, time.perf_counter()
        lr = pars.adamw.alpha
        losses.append([step, loss])
        emit("step", step=step, steps=total, loss=round(loss, 6), lr=lr, tokens=n_ctx, seconds=round(now - clock["t"], 3))
        clock["t"] = now
        if step < total:
            pars.adamw.alpha = learning_rate(step + 1, total, peak, sched, warm)  # read before the next step
            if step % save_steps == 0:
                save(llama, model, out / CHECKPOINT)
                state_path.write_text(json.dumps({"key": key, "step": step, "losses": losses}))
                emit("checkpoint", step=step)
                if crash_at is not None and step >= int(crash_at):
                    os._exit(3)  # the test's lost worker, right after a checkpoint

    callback = ggml_opt.EpochCallback(on_step)
    libs.opt_epoch(ctx, dataset, result, None, len(todo), ctypes.cast(callback, ctypes.c_void_p), None)
    train_s = time.perf_counter() - clock["start"]
    cpu_s = time.process_time() - clock["cpu"]  # every thread's CPU time: what the load does not inflate
    libs.result_free(result)
    libs.dataset_free(dataset)
    f32 = out / "model-f32.gguf"
    save(llama, model, f32)
    llama.llama_free(ctx)
    llama.llama_model_free(model)
    ggml_opt.convert(str(f32), str(out / MODEL), spec["serve_type"], threads)
    # llama.cpp saved the training window (n_ctx) as the model's context: the base's comes back,
    # or the server would refuse every prompt longer than the window.
    set_context_length(out / MODEL, context_length(Path(spec["base_f32"])))
    for leftover in (f32, out / CHECKPOINT, state_path):
        leftover.unlink(missing_ok=True)
    emit("done", model=str(out / MODEL), steps=total, trained_steps=len(todo), train_s=round(train_s, 2),
         tokens_per_s=round(len(todo) * n_ctx / train_s, 2), cpu_s=round(cpu_s, 2), threads=threads, losses=losses)


def save(llama: Any, model: Any, path: Path) -> None:
    tmp = path.with_name(f".tmp-{path.name}")
    llama.llama_model_save_to_file(model, str(tmp).encode())
    os.replace(tmp, path)


def convert_only(spec: dict[str, Any]) -> None:
    """The base as served beside its fine-tunes: the same conversion (base -> F32 -> serve_type),
    so the two rows differ by the training only."""
    keep = ggml_opt.quiet_logs()  # noqa: F841
    llama = ggml_opt.llama
    llama.llama_backend_init()
    if not os.path.isfile(spec["base_f32"]):
        Path(spec["base_f32"]).parent.mkdir(parents=True, exist_ok=True)
        ggml_opt.convert(spec["base"], spec["base_f32"], "f32", int(spec["threads"]))
    Path(spec["out"]).parent.mkdir(parents=True, exist_ok=True)
    ggml_opt.convert(spec["base_f32"], spec["out"], spec["serve_type"], int(spec["threads"]))
    emit("done", model=spec["out"])


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m jobs.finetune.cpu_worker SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[0]).read_text(encoding="utf-8"))
    try:
        (convert_only if spec.get("mode") == "convert" else train)(spec)
    except (ValueError, RuntimeError, OSError) as exc:
        emit("error", error=f"{type(exc).__name__}: {exc}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
