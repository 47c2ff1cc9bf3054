"""The first lines of every report: what produced the run, read from `RUN_DIR/run.json`.

`run.json`'s `attempts` (written by the jobs, `jobs.core.provenance`) are read here as data: the
commit and versions of the latest attempt, every model file the run used with the engine that
served it (each switch with its reason), the cluster, and what changed between attempts.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from jobs.core.rundir import read_run_record

__all__ = ["provenance_html", "provenance_lines"]

LIBRARIES = ("evalcluster", "python", "ray", "vllm", "openai", "pyarrow", "llama-cpp-python")


def _code(code: dict[str, Any]) -> str:
    if not code.get("commit"):
        return code.get("note") or "commit unknown"
    text = f"commit {code['commit'][:12]}"
    if code.get("dirty"):
        changed = code.get("changed") or []
        count = code.get("changed_count", len(changed))
        more = f", {count - 5} more" if count > 5 else ""
        text += f" with uncommitted changes ({count} file(s){': ' + ', '.join(changed[:5]) + more if changed else ''})"
    return text


def _engines(history: list[dict[str, Any]]) -> str:
    parts = []
    for k, look in enumerate(history):
        engine = look.get("engine", "unknown")
        if look.get("version"):
            engine += f" {look['version']}"
        if k == 0:
            text = f"served by {engine}"
        else:
            text = f"then by {engine} (first seen at {look.get('seen_at', '?')}, {look.get('since', '?')})"
        if look.get("fallback_reason"):
            text += f", fallback because: {look['fallback_reason'].splitlines()[0][:300]}"
        if look.get("note"):
            text += f" ({look['note']})"
        parts.append(text)
    if history:
        parts[-1] += f"; last seen {history[-1].get('last_seen', '?')}"
    return "; ".join(parts)


def _model(name: str, rec: dict[str, Any], engines: list[dict[str, Any]] | None) -> str:
    text = f"{name}: {rec.get('source', '?')}, revision {rec.get('revision', '?')}, " \
           f"model file sha256 {str(rec.get('config_sha256', '?'))[:12]}"
    weights = rec.get("weights")
    if weights:
        text += f", weights {weights.get('file')} ({weights.get('size', 0):,} bytes, sha256 " \
                f"{str(weights.get('sha256', '?'))[:12]})"
    if engines:
        text += f"; {_engines(engines)}"
    return text


def _cluster(looks: list[dict[str, Any]]) -> str:
    def one(c: dict[str, Any]) -> str:
        gpus = f"{c.get('gpus', 0):g} GPU(s)" + (f" ({', '.join(c['gpu_types'])})" if c.get("gpu_types") else "")
        return f"{c.get('nodes', '?')} node(s), {c.get('cpus', 0):g} CPU(s), {gpus}"

    text = one(looks[0])
    for look in looks[1:]:
        text += f"; then {one(look)} (first seen at {look.get('seen_at', '?')}, {look.get('since', '?')})"
    return text


def provenance_lines(record: dict[str, Any]) -> list[str]:
    """Plain-text lines on what produced a run (`run.json`'s content); [] when it records none."""
    attempts = [a for a in record.get("attempts") or [] if isinstance(a, dict)]
    if not attempts:
        return []
    last = attempts[-1]
    versions = last.get("versions") or {}
    libs = ", ".join(f"{lib} {versions[lib] or 'not installed'}" for lib in LIBRARIES if lib in versions)
    lines = [f"Produced by {_code(last.get('code') or {})}; {libs}"
             + (f"; llama.cpp: {last['llama_cpp']}" if last.get("llama_cpp") else "")
             + (f" (attempt {len(attempts)} of this run, started {last.get('started', '?')})" if len(attempts) > 1
                else f" (started {last.get('started', '?')})")]
    models: dict[str, tuple[dict[str, Any], list[dict[str, Any]] | None]] = {}
    for attempt in attempts:  # a later attempt's record of a model replaces an earlier one's
        for name, rec in (attempt.get("models") or {}).items():
            models[name] = (rec, (attempt.get("engines") or {}).get(name))
    lines += [f"Model {_model(name, rec, engines)}" for name, (rec, engines) in sorted(models.items())]
    clusters = [a["cluster"] for a in attempts if a.get("cluster")]
    if clusters:
        lines.append(f"Cluster: {_cluster(clusters[-1])}")
    for k, attempt in enumerate(attempts[1:], start=2):
        if attempt.get("changed_since_previous"):
            lines.append(f"Attempt {k} ({attempt.get('job', '?')}, {attempt.get('started', '?')}) differs from the one "
                         f"before: {'; '.join(attempt['changed_since_previous'])}")
    return lines


def provenance_html(run_dir: str | Path) -> str:
    """`provenance_lines` of `RUN_DIR/run.json` as the report's first block ('' when none)."""
    lines = provenance_lines(read_run_record(run_dir))
    if not lines:
        return ""
    items = "".join(f"<li>{html.escape(line)}</li>" for line in lines)
    return f'<div class="note provenance"><b>What produced this run</b> (run.json)<ul>{items}</ul></div>'
