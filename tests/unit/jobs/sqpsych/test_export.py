"""The fine-tuning export: dialogues written by hand in the DIALOGUES schema, exported as chat JSONL."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from jobs.core.schemas import DIALOGUES
from jobs.sqpsych.export import EXPORT_DIR, ExportConfig, export, main, run
from jobs.sqpsych.schemas import PROFILES
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError


def _turns(*pairs):
    return [{"turn": i + 1, "role": role, "model": "x", "text": text, "tokens": 3, "round": i // 2 + 1, "phase": None}
            for i, (role, text) in enumerate(pairs)]


def _dialogue(did, model, turns, status="ok", ended_by="stop_token"):
    return {"dialogue_id": did, "context_id": did.split("|")[0], "model": model, "partner_model": "client-sim",
            "prompt_version": "sqpsych-v1", "first_speaker": "therapist", "turns": turns, "n_turns": len(turns),
            "ended_by": ended_by, "status": status, "error": None if status == "ok" else "turn 3 failed",
            "stopped_at_turn": None if status == "ok" else 2, "run_id": "r", "created_at": datetime.now(timezone.utc)}


def _run_dir(tmp_path):
    # turns written out of order: the export sorts them
    d1 = _turns(("therapist", "Hello, what brings you here?"), ("client", "I feel low."),
                ("therapist", "Tell me more."), ("client", "Work is hard."), ("therapist", "Let's look at that."))
    d1 = [d1[2], d1[0], d1[1], d1[4], d1[3]]
    rows = [
        _dialogue("p1|qwen", "qwen", d1),
        _dialogue("p2|qwen", "qwen", _turns(("therapist", "Hi."), ("client", "Hi."), ("client", "Also this."),
                                            ("therapist", "Go on."), ("client", "Bye."))),
        _dialogue("p3|qwen", "qwen", _turns(("therapist", "Hi."), ("client", "Hm.")), status="error", ended_by="error"),
        _dialogue("p1|llama/3", "llama/3", _turns(("therapist", "Hi."), ("client", "Hi."), ("therapist", "")),
                  ended_by="cap"),
        _dialogue("p2|llama/3", "llama/3", _turns(("therapist", "Hi."), ("narrator", "..."))),
    ]
    TableStore(tmp_path, DIALOGUES, writer=True).append(rows)
    _profiles(tmp_path, {"p1": ("train", "public"), "p2": ("train", "public"), "p3": ("train", "public")})
    return tmp_path


def _profiles(run_dir, labels):
    TableStore(run_dir, PROFILES, writer=True).append(
        [{"context_id": c, "split": split, "sensitivity": sens, "group": "mdd", "status": "ok"}
         for c, (split, sens) in labels.items()])


def _lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_one_file_per_therapist_model_one_line_per_finished_dialogue(tmp_path):
    manifest = export(_run_dir(tmp_path))
    out = tmp_path / EXPORT_DIR
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["llama-3.jsonl", "qwen.jsonl"]
    qwen = _lines(out / "qwen.jsonl")
    assert [q["metadata"]["dialogue_id"] for q in qwen] == ["p1|qwen", "p2|qwen"]  # the failed one left out
    first = qwen[0]
    assert first["messages"][0]["role"] == "system" and "CBT" in first["messages"][0]["content"]
    assert [(m["role"], m["content"]) for m in first["messages"][1:]] == [
        ("assistant", "Hello, what brings you here?"), ("user", "I feel low."), ("assistant", "Tell me more."),
        ("user", "Work is hard."), ("assistant", "Let's look at that.")]
    assert first["metadata"] == {"dialogue_id": "p1|qwen", "profile": "p1", "model": "qwen",
                                 "client_model": "client-sim", "variant": None, "prompt_version": "sqpsych-v1",
                                 "first_speaker": "therapist", "n_turns": 5, "ended_by": "stop_token",
                                 "run_id": "r", "split": "train", "sensitivity": "public",
                                 "leakage_longest_run": 0}
    # consecutive client turns joined; the trailing client turn dropped (an example ends on the assistant)
    assert [(m["role"], m["content"]) for m in qwen[1]["messages"][1:]] == [
        ("assistant", "Hi."), ("user", "Hi.\n\nAlso this."), ("assistant", "Go on.")]
    assert manifest["models"]["qwen"] == {"file": "export/qwen.jsonl", "dialogues": 3, "exported": 2,
                                          "left_out": {"status error": 1}, "leakage_flagged": []}
    llama = manifest["models"]["llama/3"]
    assert llama["exported"] == 1 and "role 'narrator'" in next(iter(llama["left_out"]))
    [capped] = _lines(out / "llama-3.jsonl")
    assert [m["role"] for m in capped["messages"]] == ["system", "assistant"]  # the empty last turn is skipped
    assert json.loads((out / "manifest.json").read_text())["models"].keys() == {"qwen", "llama/3"}


def test_options_and_the_pipeline_step(tmp_path):
    run_dir = _run_dir(tmp_path)
    (tmp_path / "sys.txt").write_text("Be a CBT therapist.\n")
    manifest = export(run_dir, ExportConfig(system_prompt_file=str(tmp_path / "sys.txt"), ended_by=["stop_token"]))
    assert manifest["models"]["llama/3"]["left_out"]["ended by cap"] == 1
    assert _lines(run_dir / EXPORT_DIR / "qwen.jsonl")[0]["messages"][0]["content"] == "Be a CBT therapist."
    main([str(run_dir), "--no-system-prompt"])
    assert _lines(run_dir / EXPORT_DIR / "qwen.jsonl")[0]["messages"][0]["role"] == "assistant"

    # the pipeline step reads run_dir, dry_run and, when the config has one, export
    cfg = SimpleNamespace(run_dir=str(run_dir), dry_run=False, export=ExportConfig(min_turns=4))
    assert run(cfg) == 0 and len(_lines(run_dir / EXPORT_DIR / "qwen.jsonl")) == 2
    assert not (run_dir / EXPORT_DIR / "llama-3.jsonl").read_text()  # its one exportable dialogue has 2 turns


def test_a_run_without_dialogues_is_an_error_naming_the_table(tmp_path):
    with pytest.raises(ConfigError, match="dialogues"):
        export(tmp_path)


def test_the_test_split_stays_out_and_the_label_travels(tmp_path):
    """Issue 17 point 10: main exported every split (test dialogues into the training file) and
    dropped the sensitivity label."""
    turns = _turns(("therapist", "Hello."), ("client", "Hi."), ("therapist", "How are you?"))
    TableStore(tmp_path, DIALOGUES, writer=True).append(
        [_dialogue(f"{c}|m", "m", turns) for c in ("tr", "dv", "te", "orphan")])
    _profiles(tmp_path, {"tr": ("train", "restricted"), "dv": ("dev", "public"), "te": ("test", "restricted")})
    manifest = export(tmp_path)
    lines = _lines(tmp_path / EXPORT_DIR / "m.jsonl")
    assert [x["metadata"]["profile"] for x in lines] == ["tr"]
    assert lines[0]["metadata"]["split"] == "train" and lines[0]["metadata"]["sensitivity"] == "restricted"
    assert manifest["sensitivity"] == "restricted" and manifest["splits"] == ["train"]
    assert manifest["models"]["m"]["left_out"] == {"split dev (export.splits: ['train'])": 1,
                                                   "split test (export.splits: ['train'])": 1,
                                                   "no profile: split unknown": 1}
    asked = export(tmp_path, ExportConfig(splits=["train", "dev", "test"]))
    assert [x["metadata"]["profile"] for x in _lines(tmp_path / EXPORT_DIR / "m.jsonl")] == ["dv", "te", "tr"]
    assert asked["sensitivity"] == "restricted"
    only_public = export(tmp_path, ExportConfig(splits=["dev"]))
    assert only_public["sensitivity"] == "public"


def test_the_leakage_audit_flags_a_recited_record_in_the_manifest(tmp_path):
    turns = _turns(("therapist", "How is your energy?"), ("client", "My answer: I get tired from doing almost anything."),
                   ("therapist", "Let's look at that."))
    TableStore(tmp_path, DIALOGUES, writer=True).append([_dialogue("c1|m", "m", turns)])
    TableStore(tmp_path, PROFILES, writer=True).append(
        [{"context_id": "c1", "split": "train", "sensitivity": "restricted", "group": "mdd", "status": "ok",
          "profile": "Question BDI17: Fatigability\nAnswer: I get tired from doing almost anything."}])
    manifest = export(tmp_path)
    assert manifest["models"]["m"]["leakage_flagged"] == ["c1|m"]
    # "answer i get tired from doing almost anything": 8 words verbatim, the threshold
    assert _lines(tmp_path / EXPORT_DIR / "m.jsonl")[0]["metadata"]["leakage_longest_run"] == 8


def test_the_export_holds_one_models_dialogues_at_a_time(tmp_path, monkeypatch):
    # five dialogues, three of qwen and two of llama/3: no read with the turns returns more than three
    read, sizes = TableStore.read, []

    def spy(self, columns=None, only=None):
        df = read(self, columns, only)
        if self.table is DIALOGUES and "turns" in df.columns:
            sizes.append(len(df))
        return df

    monkeypatch.setattr(TableStore, "read", spy)
    manifest = export(_run_dir(tmp_path))
    assert sorted(sizes) == [2, 3]
    assert {m: v["dialogues"] for m, v in manifest["models"].items()} == {"llama/3": 2, "qwen": 3}
