"""`jobs.inputs.read_contexts`: good rows kept in order, bad rows reported, config errors name the fix."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from jobs.config import ConfigError, DatasetConfig
from jobs.inputs import read_contexts
from tests.conftest import ROOT
import pyarrow as pa
import pyarrow.parquet as pq
from jobs.config import ColumnMapping, ConfigError, DatasetConfig
from jobs.inputs import SENSITIVITY_METADATA_KEY, read_contexts


def dataset(path: Path, context="context", id="id", human_response=None, **kw) -> DatasetConfig:
    return DatasetConfig(
        name=kw.pop("name", "t"),
        path=str(path),
        columns={"id": id, "context": context, "human_response": human_response},
        sensitivity=kw.pop("sensitivity", "public"),
        **kw,
    )


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def bad_rows(report) -> list[tuple[int, str, str]]:
    return [(b.row, b.field, b.reason) for b in report.bad]


def shipped(name: str) -> DatasetConfig:
    return DatasetConfig(**yaml.safe_load((ROOT / "conf" / "dataset" / f"{name}.yaml").read_text()))


# --- configuration errors ----------------------------------------------------------------------


def test_missing_file_names_path_and_key(tmp_path):
    path = tmp_path / "nowhere.csv"
    with pytest.raises(ConfigError) as err:
        read_contexts(dataset(path))
    msg = str(err.value)
    assert str(path) in msg and "dataset.path" in msg and "not found" in msg


def test_relative_path_is_from_repo_root():
    ds = dataset(Path("data/demo/counselchat_demo.csv"), id="question_id", context="question")
    assert ds.resolved_path() == ROOT / "data" / "demo" / "counselchat_demo.csv"
    contexts, _ = read_contexts(ds)
    assert len(contexts) == 24


@pytest.mark.parametrize(
    "mapping, column, key",
    [
        ({"context": "text"}, "text", "columns.context"),
        ({"context": ["title", "body"]}, "body", "columns.context"),
        ({"id": "qid"}, "qid", "columns.id"),
        ({"human_response": "answer"}, "answer", "columns.human_response"),
    ],
)
def test_missing_mapped_column_names_column_key_and_file_columns(mapping, column, key, tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": ["1"], "title": ["A title"], "context": ["some words here"]}).to_csv(path, index=False)
    with pytest.raises(ConfigError) as err:
        read_contexts(dataset(path, **{"context": "context", "id": "id", **mapping}))
    msg = str(err.value)
    assert repr(column) in msg
    assert f"dataset.{key}" in msg
    assert "['id', 'title', 'context']" in msg  # the columns the file does have
    assert str(path) in msg


def test_unknown_suffix_with_auto_format(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("id,context\n1,hello there\n")
    with pytest.raises(ConfigError, match="dataset.format"):
        read_contexts(dataset(path))
    contexts, _ = read_contexts(dataset(path, format="csv"))
    assert contexts["context"].tolist() == ["hello there"]


def test_a_broken_json_array_is_a_config_error_with_line_and_column(tmp_path):
    """A JSON array is one value: a broken one has no rows to keep; the error says where."""
    path = tmp_path / "in.json"
    path.write_text('[\n {"id": "1", "context": "fine"},\n {"id": "2" "context": "x"}\n]\n')
    with pytest.raises(ConfigError, match=r"in.json: not valid JSON at line 3, column 13"):
        read_contexts(dataset(path))


# --- bad rows ----------------------------------------------------------------------------------


def test_csv_bad_rows_reported_good_rows_kept_in_order(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame(
        {
            "id": ["a", "b", "c", "", "d", "a", "e"],
            "context": ["first one", "", "   \n\t ", "no id here", "second one", "dup id", "third one"],
        }
    ).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["a", "d", "e"]
    assert contexts["context"].tolist() == ["first one", "second one", "third one"]
    assert bad_rows(report) == [
        (2, "context", "empty context"),
        (3, "context", "empty context"),
        (4, "id", "missing id"),
        (6, "id", "duplicate id"),
    ]
    assert [b.id for b in report.bad] == ["b", "c", None, "a"]
    assert report.rows_read == 7 and report.rows_ok == 3
    assert report.rows_ok + len(report.bad) == report.rows_read


def test_id_first_seen_on_a_bad_row_is_not_a_duplicate(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": ["b", "b"], "context": ["", "now with text"]}).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["b"]
    assert bad_rows(report) == [(1, "context", "empty context")]


def test_jsonl_non_text_contexts_are_bad_rows(tmp_path):
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [
            {"id": "r1", "context": "a real message"},
            {"id": "r2", "context": 42},
            {"id": "r3", "context": ["a", "list"]},
            {"id": "r4", "context": {"a": "dict"}},
            {"id": "r5", "context": True},
            {"id": "r6", "context": None},
            {"id": None, "context": "no id"},
            {"context": "id key absent"},
            {"id": "r9", "context": "another real one"},
        ],
    )
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["r1", "r9"]
    assert bad_rows(report) == [
        (2, "context", "context is not text (int)"),
        (3, "context", "context is not text (list)"),
        (4, "context", "context is not text (dict)"),
        (5, "context", "context is not text (bool)"),
        (6, "context", "empty context"),
        (7, "id", "missing id"),
        (8, "id", "missing id"),
    ]
    assert report.rows_ok + len(report.bad) == report.rows_read == 9


def test_non_text_part_of_a_joined_context_is_named(tmp_path):
    """Regression: the bad row named the first context column's type (`str`), not the offending one."""
    path = write_jsonl(
        tmp_path / "in.jsonl",
        [{"id": "1", "title": "A title", "body": 12345}, {"id": "2", "title": ["x"], "body": "text"}],
    )
    _, report = read_contexts(dataset(path, context=["title", "body"]))
    assert bad_rows(report) == [
        (1, "body", "context is not text (int)"),
        (2, "title", "context is not text (list)"),
    ]


def test_min_context_words(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": ["1", "2"], "context": ["help", "please help me"]}).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path, min_context_words=3))
    assert contexts["context_id"].tolist() == ["2"]
    assert bad_rows(report) == [(1, "context", "context shorter than 3 words")]


def test_dedupe_on_context(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": ["1", "2", "3"], "context": ["same words", "other words", " same words "]}).to_csv(
        path, index=False
    )
    contexts, report = read_contexts(dataset(path, dedupe_on="context"))
    assert contexts["context_id"].tolist() == ["1", "2"]
    assert bad_rows(report) == [(3, "context", "duplicate context")]


def test_duplicate_ids_are_refused_even_when_deduplicating_on_context(tmp_path):
    """Regression: with dedupe_on=context two rows with one id were both kept (two calls, one key)."""
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": ["1", "1"], "context": ["first words", "second words"]}).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path, dedupe_on="context"))
    assert contexts["context_id"].tolist() == ["1"]
    assert bad_rows(report) == [(2, "id", "duplicate id")]


def test_no_id_column_uses_row_numbers(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"context": ["one msg", "", "three msg"]}).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path, id=None))
    assert contexts["context_id"].tolist() == ["1", "3"]
    assert bad_rows(report) == [(2, "context", "empty context")]


# --- mapping, limit, types -----------------------------------------------------------------------


def test_list_of_context_columns_is_joined_with_blank_lines(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame(
        {"qid": ["1", "2", "3"], "title": ["Title one", "", "  "], "text": [" Body one ", "Body two", "Body three"]}
    ).to_csv(path, index=False)
    contexts, report = read_contexts(dataset(path, id="qid", context=["title", "text"]))
    assert contexts["context"].tolist() == ["Title one\n\nBody one", "Body two", "Body three"]
    assert not report.bad


def test_limit_counts_good_rows_only(tmp_path):
    path = tmp_path / "in.csv"
    pd.DataFrame({"id": [str(i) for i in range(10)], "context": ["", "x y", "", "a b", "c d", "e f"] + ["g h"] * 4}).to_csv(
        path, index=False
    )
    contexts, report = read_contexts(dataset(path, limit=3))
    assert contexts["context_id"].tolist() == ["1", "3", "4"]
    assert report.rows_ok == 3
    assert bad_rows(report) == [(1, "context", "empty context"), (3, "context", "empty context")]


def test_ids_stay_strings_csv(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,context,answer\n007,hello there,NA\n0.50,second one,\n1e3,third one,a reply\n")
    contexts, _ = read_contexts(dataset(path, human_response="answer"))
    assert contexts["context_id"].tolist() == ["007", "0.50", "1e3"]
    # "NA" is text in a CSV, not a missing value.
    assert contexts["human_response"].tolist()[0] == "NA"
    assert contexts["human_response"].tolist()[2] == "a reply"


def test_ids_stay_strings_jsonl_and_parquet(tmp_path):
    jsonl = write_jsonl(tmp_path / "in.jsonl", [{"id": "007", "context": "hello there"}, {"id": "010", "context": "x y"}])
    contexts, _ = read_contexts(dataset(jsonl))
    assert contexts["context_id"].tolist() == ["007", "010"]
    parquet = tmp_path / "in.parquet"
    pd.DataFrame({"id": ["007", "010"], "context": ["hello there", "x y"]}).to_parquet(parquet)
    contexts, _ = read_contexts(dataset(parquet))
    assert contexts["context_id"].tolist() == ["007", "010"]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_integer_ids_with_a_missing_one_stay_integers(fmt, tmp_path):
    """Regression: a null in an integer id column made pandas read floats, so id 7 became "7.0"."""
    rows = [{"id": 7, "context": "hello there"}, {"id": None, "context": "lost id"}, {"id": 12, "context": "x y"}]
    if fmt == "jsonl":
        path = write_jsonl(tmp_path / "in.jsonl", rows)
    else:
        path = tmp_path / "in.parquet"
        pd.DataFrame(rows).to_parquet(path)
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["7", "12"]
    assert bad_rows(report) == [(2, "id", "missing id")]


def test_parquet_with_nulls_and_human_response(tmp_path):
    path = tmp_path / "in.parquet"
    pd.DataFrame(
        {
            "id": ["1", "2", "3"],
            "context": ["first message", None, "third message"],
            "answer": ["reply one", "reply two", None],
        }
    ).to_parquet(path)
    contexts, report = read_contexts(dataset(path, human_response="answer"))
    assert contexts["context_id"].tolist() == ["1", "3"]
    assert contexts["human_response"].iloc[0] == "reply one"
    assert pd.isna(contexts["human_response"].iloc[1])
    assert bad_rows(report) == [(2, "context", "empty context")]


def test_output_columns_and_empty_result(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,context\n1,\n")
    contexts, report = read_contexts(dataset(path))
    assert list(contexts.columns) == ["context_id", "context", "human_response"]
    assert contexts.empty and report.rows_ok == 0 and report.rows_read == 1


def test_summary_and_written_report(tmp_path):
    path = tmp_path / "in.csv"
    ids = [str(i) for i in range(10)] + ["1"]
    pd.DataFrame({"id": ids, "context": ["ok words"] * 3 + [""] * 7 + ["dup words"]}).to_csv(path, index=False)
    _, report = read_contexts(dataset(path))
    text = report.summary()
    assert "11 rows read, 3 usable, 8 bad" in text
    assert "empty context: 7" in text and "duplicate id: 1" in text
    assert "line 5 (row 4), field 'context' (id 3): empty context" in text  # line 1 is the header
    assert "... and 3 more" in text  # only the first five are listed
    report.write(tmp_path / "run" / "input_report.json")
    data = json.loads((tmp_path / "run" / "input_report.json").read_text())
    assert data["rows_read"] == 11 and data["rows_ok"] == 3
    assert data["counts"] == {"empty context": 7, "duplicate id": 1}
    assert data["bad"][-1] == {"row": 11, "field": "id", "reason": "duplicate id", "id": "1", "line": 12}
    assert data["encoding"] == "utf-8"


def test_summary_without_bad_rows(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text("id,context\n1,hello there\n")
    _, report = read_contexts(dataset(path))
    assert report.summary() == f"{path}: 1 rows read, 1 usable"


# --- the shipped datasets ----------------------------------------------------------------------


def test_shipped_demo_dataset():
    contexts, report = read_contexts(shipped("counselchat_demo"))
    assert report.rows_read == 24 and report.rows_ok == 24 and not report.bad
    assert len(contexts) == 24 and contexts["context_id"].is_unique
    assert contexts["context"].str.contains("\n\n").all()  # title and question joined
    assert contexts["human_response"].notna().all()


def test_full_counselchat(shared_data):
    ds = shipped("counselchat")
    assert ds.resolved_path().resolve() == (shared_data / "counsel-chat" / "20200325_counsel_chat.csv").resolve()
    contexts, report = read_contexts(ds)
    raw = pd.read_csv(ds.resolved_path(), dtype=str, keep_default_na=False)
    assert report.rows_read == len(raw) == 2129
    assert raw["questionID"].nunique() == 815
    assert report.rows_ok == 815 == len(contexts)
    assert report.counts() == {"duplicate id": 2129 - 815}
    assert all(b.field == "questionID" for b in report.bad)
    assert report.rows_ok + len(report.bad) == report.rows_read
    assert contexts["context_id"].is_unique
    # One row per question, the first answer's row, in file order.
    first = raw.drop_duplicates("questionID", keep="first")
    assert contexts["context_id"].tolist() == first["questionID"].tolist()
    assert contexts["human_response"].tolist() == first["answerText"].tolist()


def test_a_file_marked_restricted_is_never_read_as_public(tmp_path):
    """Curated contexts holding Psych8k rows were read as public and could reach an external API."""
    path = tmp_path / "contexts.parquet"
    table = pa.table({"context_id": ["1"], "context": ["I cannot sleep at night."]})
    pq.write_table(table.replace_schema_metadata({SENSITIVITY_METADATA_KEY: b"restricted"}), path)
    ds = dict(name="curated", path=str(path), columns=ColumnMapping(id="context_id", context="context"))
    with pytest.raises(ConfigError, match="restricted.*dataset.sensitivity=restricted"):
        read_contexts(DatasetConfig(**ds, sensitivity="public"))
    contexts, _ = read_contexts(DatasetConfig(**ds, sensitivity="restricted"))
    assert len(contexts) == 1
