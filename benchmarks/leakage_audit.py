"""SQPsych export's leakage audit at the paper's count: the suffix automaton against the quadratic
dynamic programme it replaced (issue 42, point 1).

    python -m benchmarks.leakage_audit                  # 2,090 dialogues; the old routine on 40 of them
    python -m benchmarks.leakage_audit --old-sample 0   # the old routine on all (~5-8 min of one core)
    python -m benchmarks.leakage_audit --recite 5       # every 5th turn recites 40 words of the record

The input is what `benchmarks.paper_counts --method sqpsych` feeds the export, built without the
pipeline: the synthetic cohort's first 2,090 clients (`generate_cohort`, seed 0, rendered by the
codebook as the cohort step renders them) and, per client, the dialogue the loopback endpoint's
script writes (`benchmarks.scripted.Script` with SQPsych's labels, stop token and end turns: 31 to
61 turns of ~60 words), its labels and stop token stripped as synthesis strips them. The audit is
the export's per-dialogue work: `words` of both texts and `longest_shared_run`, timed in wall and
in this process's CPU seconds (the second is what a loaded, shared machine inflates least). The new routine
runs on every pair; the old one (kept here verbatim) on an evenly spaced sample, its time scaled to
all pairs, and both must give the same run on that sample. Appended to
docs/benchmarks/leakage_audit.json.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from benchmarks.harness import MODEL, REPO, machine, save
from benchmarks.scripted import Script, end_turn

OUT = REPO / "docs" / "benchmarks" / "leakage_audit.json"
DIALOGUES = 2090


def quadratic_run(a: list[str], b: list[str]) -> int:
    """The audit's routine before the automaton: every word of `a` against every word of `b`."""
    best, prev = 0, [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, 1):
            if x == y:
                cur[j] = prev[j - 1] + 1
                best = max(best, cur[j])
        prev = cur
    return best


def pairs(n: int, recite: int = 0) -> list[tuple[str, str]]:
    """(dialogue text, profile text) for the cohort's first `n` clients, as the module's docstring
    says; `recite` > 0: every `recite`-th turn is instead 40 consecutive words of the record (from
    a place that moves with the turn), a client reciting its record: long shared runs, and most of
    the record's words shared."""
    from jobs.sqpsych.codebook import load_codebook
    from jobs.sqpsych.synthesize import STOP_TOKEN, SynthesizeConfig
    from jobs.sqpsych.synthetic import PAPER_SIZE, generate_cohort

    rules = SynthesizeConfig.model_fields
    first, last = rules["min_turns"].default, rules["countdown"].default_factory().end_turn
    labels = ("Therapist", "Client")
    script = Script(labels=labels, stop_token=STOP_TOKEN, end_turns=(first, last))
    codebook = load_codebook()
    out, calls = [], 0
    for record in generate_cohort(max(n, PAPER_SIZE))[:n]:
        did = f"{record.client_id}|{MODEL}"
        profile = codebook.render(record)
        profile_words = profile.split()
        turns = []
        for turn in range(1, end_turn(did, first, last) + 1):
            calls += 1
            if recite and turn % recite == 0:
                at = (turn * 37) % max(1, len(profile_words) - 40)
                turns.append(" ".join(profile_words[at:at + 40]))
                continue
            text = script.answer({}, f"{did}#{turn}", calls).replace(STOP_TOKEN, "")
            for label in labels:
                text = text.removeprefix(f"{label}: ")
            turns.append(text.strip())
        out.append((" ".join(turns), profile))
    return out


def main() -> None:
    from jobs.sqpsych.leakage import longest_shared_run, words

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dialogues", type=int, default=DIALOGUES)
    ap.add_argument("--old-sample", type=int, default=40, help="pairs the old routine runs on (0: all)")
    ap.add_argument("--recite", type=int, default=0,
                    help="every N-th turn recites 40 words of the record (0: the script's turns only)")
    ap.add_argument("--no-save", action="store_true", help="print only; do not append to the JSON")
    args = ap.parse_args()

    record = {**machine(), "recite_every": args.recite}
    texts = pairs(args.dialogues, args.recite)
    t0, c0 = time.perf_counter(), time.process_time()
    runs = [longest_shared_run(words(d), words(p)) for d, p in texts]
    new_s, new_cpu = time.perf_counter() - t0, time.process_time() - c0
    step = max(1, len(texts) // args.old_sample) if args.old_sample else 1
    sample = list(range(0, len(texts), step))
    t0, c0 = time.perf_counter(), time.process_time()
    old = [quadratic_run(words(texts[i][0]), words(texts[i][1])) for i in sample]
    old_sample_s, old_sample_cpu = time.perf_counter() - t0, time.process_time() - c0
    differ = [i for i, r in zip(sample, old) if runs[i] != r]
    if differ:
        raise SystemExit(f"the automaton and the quadratic routine disagree on pairs {differ[:10]}")
    n_words = [(len(words(d)), len(words(p))) for d, p in texts]
    old_s, old_cpu = (x * len(texts) / len(sample) for x in (old_sample_s, old_sample_cpu))
    record = {**record, "dialogues": len(texts),
              "dialogue_words_mean": round(sum(a for a, _ in n_words) / len(n_words)),
              "profile_words_mean": round(sum(b for _, b in n_words) / len(n_words)),
              "longest_run_max": max(runs), "flagged_8": sum(r >= 8 for r in runs),
              # wall seconds, and this process's CPU seconds (what a shared machine's load does not inflate)
              "audit_s": round(new_s, 2), "audit_cpu_s": round(new_cpu, 2),
              "audit_ms_per_dialogue": round(1000 * new_s / len(texts), 2),
              "old_pairs_timed": len(sample), "old_s_for_all": round(old_s, 1), "old_cpu_s_for_all": round(old_cpu, 1),
              "old_ms_per_dialogue": round(1000 * old_sample_s / len(sample), 1),
              "speedup_cpu": round(old_cpu / new_cpu, 1), "equal_on_old_pairs": True,
              "load_avg_1m_at_end": round(os.getloadavg()[0], 2)}
    if not args.no_save:
        save(OUT, record)
    print(json.dumps(record, indent=1))
    timed = "timed on all" if step == 1 else f"{len(sample)} timed, scaled"
    print(f"\nleakage audit of {len(texts):,} dialogues ({record['dialogue_words_mean']:,} x "
          f"{record['profile_words_mean']:,} words on average): {new_s:.1f} s ({new_cpu:.1f} CPU-s) with the "
          f"automaton, {old_s:.0f} s ({old_cpu:.0f} CPU-s) with the quadratic routine ({timed}); "
          f"load {record['load_avg_1m_at_start']} -> {record['load_avg_1m_at_end']}")


if __name__ == "__main__":
    main()
