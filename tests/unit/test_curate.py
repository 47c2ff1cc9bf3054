"""`jobs.curate` without Ray: sources, quality filters, label parsing, split, statistics, the job
with `labeler=null`, and the label stage against the loopback fake endpoint."""

from __future__ import annotations

import asyncio
import json
import random
import sys

import hydra
import jsonschema
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from jobs.config import ConfigError, DatasetConfig, validate
from jobs.curate import (
    CurateConfig,
    LabelStage,
    Taxonomy,
    assign_split,
    count_notes,
    dataset_stats,
    label_note,
    label_schema,
    parse_labels,
    run,
    stats_markdown,
)
from jobs.curate_sources import (
    FilterConfig,
    SourceConfig,
    apply_filters,
    load_source,
    normalize_for_dedupe,
    resolve_sources,
    strip_tags,
    strip_wrapping_quotes,
    unescape_entities,
)
from jobs.schemas import CONTEXTS
from serving.config import ModelConfig
from tests.conftest import ROOT
from tests.fakes.openai_server import FakeServer

CONF = ROOT / "conf"
TAXONOMY = Taxonomy(**yaml.safe_load((CONF / "taxonomy" / "conditions.yaml").read_text()))
LONG = "I have been struggling with this for many months and I do not know what to do anymore."
ANSWER = "It sounds like you are carrying a lot right now, and it makes sense to ask for some help."


def source(name: str, context="context", human_response: str | None = "answer", **kw) -> SourceConfig:
    return SourceConfig(name=name, path=kw.pop("path", f"{name}.csv"), sensitivity="public",
                        columns={"id": "id", "context": context, "human_response": human_response}, **kw)


def rows(*items: tuple[str, str | None]) -> pd.DataFrame:
    return pd.DataFrame([{"source_id": str(i), "context": c, "human_response": r}
                         for i, (c, r) in enumerate(items, start=1)])


def steps_by_name(steps) -> dict[str, dict[str, int]]:
    return {s.name: s.per_source for s in steps}


# --- taxonomy ----------------------------------------------------------------------------------


def test_taxonomy_has_23_unique_conditions_with_descriptions():
    assert len(TAXONOMY.conditions) == 23
    assert len(set(TAXONOMY.ids)) == 23
    assert all(c.name and c.description for c in TAXONOMY.conditions)
    for wanted in ("depression", "anxiety", "trauma_ptsd", "suicidal_ideation_self_harm", "lgbtq_identity"):
        assert wanted in TAXONOMY.ids


def test_taxonomy_rejects_repeated_ids():
    with pytest.raises(ValueError, match="repeated"):
        Taxonomy(version="x", conditions=[{"id": "a", "name": "A", "description": "d"}] * 2)


# --- cleaning and filters ----------------------------------------------------------------------


def test_html_cleaning_helpers():
    assert unescape_entities("you &amp; me &quot;ok&quot; &#39;x&#39; &nbsp;") == "you & me \"ok\" 'x' \xa0"
    assert strip_tags("<p>Hello <b>there</b></p><br/>bye") == "\nHello there\n\nbye"
    assert strip_tags('<a href="x">link</a> <!-- note --> <span class="c">t</span>') == "link  t"
    # Not markup: a heart, a comparison, a made-up bracket.
    for text in ("I <3 you", "if x < p and q > r", "<unsure> what to do"):
        assert strip_tags(text) == text
    assert strip_wrapping_quotes('"I feel low."') == "I feel low."
    assert strip_wrapping_quotes("\u201cI feel low.\u201d") == "I feel low."
    assert strip_wrapping_quotes('"He said" and "she said"') == '"He said" and "she said"'
    assert normalize_for_dedupe("  I'm SAD -- really\n sad!! ") == normalize_for_dedupe("i m sad really sad")


def test_each_filter_counts_per_source_and_counts_sum_up():
    a, b = source("a"), source("b", human_response=None)
    data_a = rows(
        ("I feel &quot;low&quot; &amp; tired " + LONG, ANSWER),           # entities -> kept, changed
        ("<p>" + LONG + "</p><br>", "<b>" + ANSWER + "</b>"),               # tags -> kept, changed
        ("<p></p>", ANSWER),                                                 # empty after cleaning
        (LONG, "   "),                                                       # empty response
        ("Help me.", ANSWER),                                                # too short context
        (LONG + " again", "Thanks."),                                        # too short response
        (" ".join(["word"] * 1001), ANSWER),                                 # too long context
        (LONG.upper() + "!!", ANSWER),                                       # duplicate within a
    )
    data_b = rows(
        ('"' + LONG + '"', None),                                            # quotes; duplicate across
        ("A completely different worry about my sleep and my job every night.", None),
    )
    kept, steps = apply_filters([(a, data_a), (b, data_b)], FilterConfig())
    counts = steps_by_name(steps)
    assert counts["html_entities"] == {"a": 1, "b": 0}
    assert counts["html_tags"] == {"a": 2, "b": 0}
    assert counts["wrapping_quotes"] == {"a": 0, "b": 1}
    assert counts["empty"] == {"a": 2, "b": 0}
    assert counts["too_short"] == {"a": 2, "b": 0}
    assert counts["too_long"] == {"a": 1, "b": 0}
    assert counts["duplicate_within_source"] == {"a": 1, "b": 0}
    assert counts["duplicate_across_sources"] == {"a": 0, "b": 1}
    assert kept["context_id"].tolist() == ["a:1", "a:2", "b:2"]
    assert kept.loc[0, "context"].startswith('I feel "low" & tired')
    assert "<" not in kept.loc[1, "context"] and kept.loc[1, "human_response"] == ANSWER
    removed = {name: sum(c.values()) for name, c in counts.items()
               if next(s for s in steps if s.name == name).action == "removed"}
    assert sum(removed.values()) + len(kept) == len(data_a) + len(data_b)
    assert kept["context_words"].tolist() == [len(t.split()) for t in kept["context"]]
    assert pd.isna(kept.loc[2, "response_words"]) and pd.isna(kept.loc[2, "human_response"])


def test_filters_can_be_switched_off_and_thresholds_moved():
    a = source("a")
    data = rows(("&amp; <p>" + LONG + "</p>", ANSWER), ("Help me now.", "Ok."), (LONG, ANSWER), (LONG, ANSWER))
    cfg = FilterConfig(unescape_html_entities=False, strip_html_tags=False, min_context_words=1,
                       min_response_words=1, dedupe=False)
    kept, steps = apply_filters([(a, data)], cfg)
    assert len(kept) == 4 and kept.loc[0, "context"].startswith("&amp; <p>")
    assert all(s.total == 0 for s in steps)


def test_dedupe_across_sources_keeps_the_first_source_and_matches_a_title_plus_body_context():
    """MentalBench reuses CounselChat question bodies without their titles: same context."""
    cc = source("cc", context=["title", "text"])
    mb = source("mb", human_response=None)
    body = "My partner and I fight every day about money and I feel like it is my fault."
    kept, steps = apply_filters(
        [(cc, rows(("Constant fights\n\n" + body, ANSWER))), (mb, rows((body.lower(), None), (LONG, None)))],
        FilterConfig())
    assert kept["context_id"].tolist() == ["cc:1", "mb:2"]
    assert steps_by_name(steps)["duplicate_across_sources"] == {"cc": 0, "mb": 1}
    kept, _ = apply_filters([(cc, rows(("Constant fights\n\n" + body, ANSWER))), (mb, rows((body, None)))],
                            FilterConfig(dedupe_on_body=False))
    assert len(kept) == 2
    # The other order: the first source wins, whichever it is.
    kept, steps = apply_filters([(mb, rows((body, None))), (cc, rows(("Constant fights\n\n" + body, ANSWER)))],
                                FilterConfig())
    assert kept["context_id"].tolist() == ["mb:1"]
    assert steps_by_name(steps)["duplicate_across_sources"] == {"mb": 0, "cc": 1}


# --- sources -----------------------------------------------------------------------------------


def alpaca_rows(n: int) -> list[dict]:
    return [{"instruction": "You are a helpful mental health counselling assistant.",
             "input": f"Client {i}: {LONG}", "output": f"Counselor {i}: {ANSWER}"} for i in range(n)]


def test_mentalchat16k_file_in_its_published_layout(tmp_path):
    csv = tmp_path / "mentalchat16k.csv"
    pd.DataFrame(alpaca_rows(3)).to_csv(csv, index=False)
    [src] = resolve_sources([{"dataset": "mentalchat16k", "path": str(csv)}], [CONF])
    assert src.name == "mentalchat16k" and src.columns.context == "input"
    got, report = load_source(src, tmp_path / "cache")
    assert report.rows_ok == 3 and report.file == str(csv)
    assert got["source"].tolist() == ["mentalchat16k"] * 3 and got["source_id"].tolist() == ["1", "2", "3"]
    assert got.loc[0, "context"] == f"Client 0: {LONG}" and got.loc[2, "human_response"] == f"Counselor 2: {ANSWER}"
    kept, _ = apply_filters([(src, got)], FilterConfig())
    assert kept["context_id"].tolist() == ["mentalchat16k:1", "mentalchat16k:2", "mentalchat16k:3"]


def test_psych8k_json_array_is_read(tmp_path):
    path = tmp_path / "psych8k.json"
    path.write_text(json.dumps(alpaca_rows(2)), encoding="utf-8")
    [src] = resolve_sources([{"dataset": "psych8k", "path": str(path)}], [CONF])
    assert src.sensitivity == "restricted"
    got, report = load_source(src, tmp_path / "cache")
    assert len(got) == 2 and report.file == str(path) and got.loc[1, "context"].startswith("Client 1")


def test_a_file_with_another_layout_names_the_missing_column_and_key(tmp_path):
    csv = tmp_path / "other.csv"
    pd.DataFrame({"question": ["q"], "answer": ["a"]}).to_csv(csv, index=False)
    [src] = resolve_sources([{"dataset": "mentalchat16k", "path": str(csv)}], [CONF])
    with pytest.raises(ConfigError) as err:
        load_source(src, tmp_path)
    msg = str(err.value)
    assert "mentalchat16k" in msg and "'output'" in msg and "columns.human_response" in msg and "question" in msg
    assert "sources=[{dataset:mentalchat16k,columns:" in msg
    pd.DataFrame({"question": ["q"], "output": ["a"]}).to_csv(csv, index=False)
    with pytest.raises(ConfigError, match="no column 'input' for dataset.columns.context"):
        load_source(src, tmp_path)


def test_missing_file_and_hub_without_datasets_say_to_download_and_set_path(tmp_path, monkeypatch):
    [src] = resolve_sources(["mentalchat16k"], [CONF])
    with pytest.raises(ConfigError, match="file not found.*set the source's path"):
        load_source(src, tmp_path)
    monkeypatch.setitem(sys.modules, "datasets", None)  # as if not installed
    [hub] = resolve_sources([{"dataset": "mentalchat16k", "hf_id": "ShenLab/MentalChat16K"}], [CONF])
    with pytest.raises(ConfigError) as err:
        load_source(hub, tmp_path)
    msg = str(err.value)
    assert "`datasets`" in msg and "huggingface.co/datasets/ShenLab/MentalChat16K" in msg and "path" in msg


def test_resolve_sources_overrides_limits_and_errors():
    cc, mb = resolve_sources(["counselchat", {"dataset": "mentalbench_contexts", "limit": 3}], [CONF], 8)
    assert (cc.limit, mb.limit) == (8, 3)
    [inline] = resolve_sources([{"dataset": "counselchat", "columns": {"human_response": None}}], [CONF])
    assert inline.columns.id == "questionID" and inline.columns.human_response is None
    with pytest.raises(ConfigError, match="unknown dataset 'nope'.*counselchat"):
        resolve_sources(["nope"], [CONF])
    with pytest.raises(ConfigError, match="more than once"):
        resolve_sources(["counselchat", "counselchat"], [CONF])
    with pytest.raises(ConfigError, match="path.*hf_id"):
        resolve_sources([{"dataset": "counselchat", "path": None}], [CONF])


@pytest.mark.parametrize("name", ["mentalchat16k", "psych8k", "curated"])
def test_new_dataset_files_are_valid_for_jobs_generate_too(name):
    DatasetConfig(**yaml.safe_load((CONF / "dataset" / f"{name}.yaml").read_text()))


# --- labels ------------------------------------------------------------------------------------


@pytest.mark.parametrize("answer, labels, invalid", [
    ('{"labels": ["depression", "anxiety"]}', ["depression", "anxiety"], []),
    ('```json\n{"labels": ["grief"]}\n```', ["grief"], []),
    ('Sure! Here you go: {"labels": ["Trauma / PTSD", "SLEEP_PROBLEMS"]} Hope it helps.', ["trauma_ptsd", "sleep_problems"], []),
    ('{"labels": ["depression", "sadness", "depression", 7]}', ["depression"], ["sadness", "7"]),
    ('["ocd", "adhd"]', ["ocd", "adhd"], []),
    ('{"labels": "anger"}', ["anger"], []),
])
def test_parse_labels_tolerates_what_models_emit(answer, labels, invalid):
    got = parse_labels(answer, TAXONOMY)
    assert (got.labels, got.invalid, got.error) == (labels, invalid, None)


def test_parse_labels_keeps_at_most_three_and_fails_without_a_valid_id():
    got = parse_labels('{"labels": ["depression", "anxiety", "stress", "grief", "anger"]}', TAXONOMY)
    assert got.labels == ["depression", "anxiety", "stress"] and got.truncated_from == 5
    assert "kept the first 3 of 5" in label_note(got, 3)
    for answer in ("", "I think depression.", '{"labels": ["sadness"]}', '{"answer": 3}', '{"labels": []}'):
        bad = parse_labels(answer, TAXONOMY)
        assert bad.labels is None and bad.error, answer
    assert parse_labels('{"labels": ["sadness"]}', TAXONOMY).invalid == ["sadness"]


def test_notes_are_counted():
    notes = [label_note(parse_labels('{"labels": ["depression", "x", "y"]}', TAXONOMY), 3),
             label_note(parse_labels('{"labels": ["a1", "depression", "anxiety", "stress", "grief"]}', TAXONOMY), 3),
             label_note(parse_labels('{"labels": ["depression"]}', TAXONOMY), 3)]
    assert notes[2] is None
    assert count_notes(pd.Series(notes)) == {"invalid_ids_dropped": 3, "rows_with_invalid_ids": 2, "rows_truncated": 1}


def test_label_schema_accepts_one_to_three_taxonomy_ids_only():
    fmt = label_schema(TAXONOMY.ids, 3)
    assert fmt["type"] == "json_schema"
    schema = fmt["json_schema"]["schema"]
    jsonschema.validate({"labels": ["depression", "ocd"]}, schema)
    for bad in ({"labels": []}, {"labels": ["x"]}, {"labels": ["ocd"] * 4}, {"labels": ["ocd"], "why": "x"}, {}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


# --- split and statistics ----------------------------------------------------------------------


def test_split_is_reproducible_order_independent_and_capped():
    ids = [f"s:{i}" for i in range(500)]
    first = assign_split(ids, 100, seed=7)
    shuffled = ids[:]
    random.Random(1).shuffle(shuffled)
    assert assign_split(shuffled, 100, seed=7) == first
    assert sum(v == "dev" for v in first.values()) == 100
    assert assign_split(ids, 100, seed=8) != first
    assert set(assign_split(ids, 10_000, seed=7).values()) == {"dev"}
    assert set(assign_split(ids, 0, seed=7).values()) == {"train"}


def test_stats_mean_words_and_top_label_combinations():
    df = pd.DataFrame({
        "source": ["a", "a", "b", "b"], "context_words": [10, 20, 30, 50],
        "response_words": [100, None, None, None], "split": ["dev", "dev", "train", "dev"],
        "labels": [["depression", "anxiety"], ["anxiety", "depression"], ["grief"], None],
    })
    stats = dataset_stats(df)
    assert stats["per_source"]["a"] == {"contexts": 2, "with_response": 1, "mean_context_words": 15.0,
                                        "mean_response_words": 100.0}
    assert stats["total"]["mean_context_words"] == 27.5 and stats["split"] == {"dev": 3, "train": 1}
    assert stats["label_combinations"][0] == {"labels": "anxiety + depression", "count": 2, "share": 0.6667}
    assert stats["label_counts"] == {"anxiety": 2, "depression": 2, "grief": 1}
    many = pd.DataFrame({"source": "a", "context_words": 1, "response_words": None, "split": "dev",
                         "labels": [[c] for c in TAXONOMY.ids]})
    assert len(dataset_stats(many)["label_combinations"]) == 15
    assert "| anxiety + depression | 2 | 66.7% |" in stats_markdown(stats)


# --- the job, composed as Hydra would, with labeler=null (no Ray) ------------------------------


def compose(*overrides: str) -> dict:
    with hydra.initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = hydra.compose(config_name="curate", overrides=list(overrides))
    return OmegaConf.to_container(cfg, resolve=True)


def test_curate_config_composes_and_sources_take_inline_overrides():
    cfg = validate(compose(), CurateConfig)
    assert cfg.sources == ["counselchat", "mentalbench_contexts"] and cfg.labeler == "gemma3-270m"
    assert len(cfg.taxonomy.conditions) == 23 and cfg.split.dev_size == 10000
    cfg = validate(compose("sources=[counselchat,{dataset:mentalchat16k,path:/data/mc.csv}]", "labeler=null"),
                   CurateConfig)
    assert cfg.sources[1] == {"dataset": "mentalchat16k", "path": "/data/mc.csv"} and cfg.labeler is None


def test_generate_reads_the_curated_file_of_its_run_dir():
    with hydra.initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        raw = hydra.compose(config_name="generate", overrides=["dataset=curated", "run_dir=/runs/x"])
    ds = OmegaConf.to_container(raw, resolve=True)["dataset"]
    assert ds["path"] == "/runs/x/contexts.parquet" and ds["columns"]["id"] == "context_id"


def test_job_without_labeler_writes_contexts_report_stats_and_resumes(tmp_path, capsys):
    mc = tmp_path / "mc.csv"
    data = alpaca_rows(6) + [alpaca_rows(1)[0], {"instruction": "i", "input": "Too short.", "output": ANSWER}]
    pd.DataFrame(data).to_csv(mc, index=False)
    run_dir = tmp_path / "run"
    raw = compose(f"run_dir={run_dir}", "labeler=null", "split.dev_size=4", "split.seed=3",
                  f"sources=[{{dataset:mentalchat16k,path:{mc}}},{{dataset:mentalbench_contexts,limit:5}}]")
    cfg = validate(raw, CurateConfig)
    assert run(cfg, [CONF]) == 0
    out = capsys.readouterr().out
    assert "duplicate_within_source" in out and "Most common label combinations" in out
    df = pd.read_parquet(run_dir / "contexts")
    assert len(df) == 6 + 5 and df["context_id"].is_unique
    assert (df["status"] == "ok").all() and df["labels"].isna().all() and df["labeler"].isna().all()
    assert sorted(df["split"].value_counts().items()) == [("dev", 4), ("train", 7)]
    report = json.loads((run_dir / "curation" / "report.json").read_text())
    by = {s["name"]: s for s in report["sources"]}
    removed = {f["name"]: f["per_source"] for f in report["filters"] if f["action"] == "removed"}
    for name, s in by.items():
        assert s["rows_read"] == sum(s["rejected_by_reader"].values()) + s["not_read_limit"] + s["loaded"]
        assert s["loaded"] == sum(r[name] for r in removed.values()) + s["kept"]
    assert by["mentalchat16k"]["rejected_by_reader"] == {"duplicate context": 1}
    assert removed["too_short"]["mentalchat16k"] == 1 and report["kept_total"] == 11
    stats = json.loads((run_dir / "curation" / "stats.json").read_text())
    assert stats["per_source"]["mentalchat16k"]["contexts"] == 6 and stats["label_combinations"] == []
    assert (run_dir / "curation" / "stats.md").is_file()
    single = pd.read_parquet(run_dir / "contexts.parquet")
    assert single["context_id"].tolist() == df.set_index("context_id").loc[single["context_id"]].index.tolist()
    assert len(single) == 11 and len(pd.read_parquet(run_dir / "contexts_dev.parquet")) == 4

    assert run(cfg, [CONF]) == 0
    assert "11 already written, 0 to write" in capsys.readouterr().out
    assert len(pd.read_parquet(run_dir / "contexts")) == 11
    again = assign_split(df["context_id"].tolist(), 4, 3)
    assert df.set_index("context_id")["split"].to_dict() == again


# --- the label stage against the loopback fake (no Ray) ----------------------------------------


def stage_for(base_url: str, **model_fields) -> LabelStage:
    model = ModelConfig(name="fake", display_name="fake", family="fake", provider="openai", source="fake",
                        locality="external", base_url=base_url, concurrency=4, timeout_s=5, max_retries=0,
                        **model_fields)
    raw = compose()
    return LabelStage(endpoints={"fake": {"model": model.model_dump(), "base_url": base_url}},
                      concurrency_share=1.0, sensitivity="public", labeler="fake",
                      taxonomy=raw["taxonomy"], labeling=raw["labeling"], run_id="r1")


BATCH = pd.DataFrame([{"context_id": f"a:{i}", "source": "a", "source_id": str(i), "context": LONG,
                       "human_response": None, "context_words": 19, "response_words": None, "split": "dev"}
                      for i in range(3)])


def test_label_stage_rows_ok_parse_error_and_error_keep_every_context():
    with FakeServer() as ok_server, FakeServer(always_fail="503") as dead:
        good = asyncio.run(stage_for(ok_server.base_url)(BATCH)).to_pandas()
        prose = asyncio.run(stage_for(ok_server.base_url, supports_json_schema=False)(BATCH)).to_pandas()
        failed = asyncio.run(stage_for(dead.base_url)(BATCH)).to_pandas()
    for df in (good, prose, failed):
        assert df.columns.tolist() == CONTEXTS.columns
        assert df["context_id"].tolist() == ["a:0", "a:1", "a:2"] and (df["context"] == LONG).all()
        assert (df["labeler"] == "fake").all() and (df["split"] == "dev").all()
    # The fake answers the schema's first enum value: a valid id.
    assert (good["status"] == "ok").all() and [list(x) for x in good["labels"]] == [["depression"]] * 3
    assert (prose["status"] == "parse_error").all() and prose["labels"].isna().all()
    assert prose["error"].str.contains("no JSON").all()
    assert (failed["status"] == "error").all() and failed["labels"].isna().all()
    assert failed["error"].str.contains("503").all()


def test_label_prompt_lists_the_taxonomy_and_cuts_long_contexts():
    stage = stage_for("http://127.0.0.1:9/v1")
    [msg] = stage.messages("word " * 2000)
    assert msg["role"] == "user" and "- suicidal_ideation_self_harm:" in msg["content"]
    assert "1 to 3 ids" in msg["content"] and len(msg["content"]) < 3000 + 4000
