"""`jobs.inputs.read_contexts` on damaged text files (issue 10, item 5): a bad byte or a bad line
is one bad row, reported at the line an editor shows (a CSV's header is line 1), and the good rows
go on; `dataset.encoding` reads files that are not UTF-8."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from jobs.config import ConfigError, DatasetConfig
from jobs.inputs import read_contexts


def dataset(path: Path, human_response=None, **kw) -> DatasetConfig:
    return DatasetConfig(name="t", path=str(path), sensitivity="public",
                         columns={"id": "id", "context": "context", "human_response": human_response}, **kw)


def bad_rows(report) -> list[tuple[int | None, int, str, str, str | None]]:
    return [(b.line, b.row, b.field, b.reason, b.id) for b in report.bad]


# --- CSV ------------------------------------------------------------------------------------------


def test_one_invalid_utf8_byte_is_one_bad_row_at_its_editor_line(tmp_path):
    """Regression: one cp1252 byte in a CSV stopped the job with "can't decode byte 0xe9 in position
    N", a byte offset, not a line; the whole file was refused."""
    path = tmp_path / "in.csv"
    path.write_bytes(
        b"id,context\n"                                   # line 1: the header
        b'1,"a quoted context\nover two lines"\n'         # lines 2-3: one record
        b"2,caf\xe9 au lait\n"                            # line 4: a cp1252 byte
        b"3,fine words\n"                                 # line 5
    )
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1", "3"]
    assert contexts["context"].tolist() == ["a quoted context\nover two lines", "fine words"]
    assert bad_rows(report) == [(4, 2, "context", "invalid UTF-8 byte 0xe9 at column 6", "2")]
    assert report.rows_read == 3 and report.rows_ok == 2
    assert report.counts() == {"invalid UTF-8 byte": 1}
    text = report.summary()
    assert "line 4 (row 2), field 'context' (id 2): invalid UTF-8 byte 0xe9 at column 6" in text
    assert "dataset.encoding" in text  # the hint for a file that is not UTF-8
    report.write(tmp_path / "run" / "input_report.json")
    data = json.loads((tmp_path / "run" / "input_report.json").read_text(encoding="utf-8"))
    assert data["bad"] == [{"row": 2, "field": "context", "reason": "invalid UTF-8 byte 0xe9 at column 6",
                            "id": "2", "line": 4}]


def test_a_bad_byte_on_a_later_line_of_a_record_names_that_line_and_reports_the_start(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b'id,context\n1,ok words\n2,"first line\nsecond \x81 line"\n3,more words\n')
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1", "3"]
    assert bad_rows(report) == [(3, 2, "context", "invalid UTF-8 byte 0x81 at line 4, column 8", "2")]


def test_a_bad_byte_in_the_id_keeps_a_printable_id(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,context\nk\xff,some words\nk2,other words\n")
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["k2"]
    [bad] = report.bad
    assert (bad.line, bad.field, bad.id) == (2, "id", "k\ufffd")
    report.summary().encode("utf-8")  # no lone surrogate left to break the console or the JSON


def test_a_bad_byte_in_the_header_is_a_config_error_that_names_the_encoding_option(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,r\xe9sum\xe9\n1,words here\n")
    with pytest.raises(ConfigError, match=r"in.csv: the header \(line 1\) has an invalid UTF-8 byte 0xe9 "
                                          r"at column 5.*dataset.encoding"):
        read_contexts(dataset(path))


def test_encoding_option_reads_a_cp1252_file(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes("id,context,answer\n1,café crème “quoted”,réponse\n2,naïve words,ok\n".encode("cp1252"))
    contexts, report = read_contexts(dataset(path, human_response="answer", encoding="cp1252"))
    assert contexts["context"].tolist() == ["café crème “quoted”", "naïve words"]
    assert contexts["human_response"].tolist() == ["réponse", "ok"]
    assert not report.bad and report.encoding == "cp1252"
    # Read as UTF-8, the same file is two bad rows, not a refused file.
    _, as_utf8 = read_contexts(dataset(path, human_response="answer"))
    assert [(b.line, b.reason) for b in as_utf8.bad] == [(2, "invalid UTF-8 byte 0xe9 at column 6"),
                                                         (3, "invalid UTF-8 byte 0xef at column 5")]


def test_a_byte_the_chosen_encoding_lacks_names_that_encoding(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"id,context\n1,fine words\n2,bad \x81 byte\n")  # 0x81 is undefined in cp1252
    contexts, report = read_contexts(dataset(path, encoding="cp1252"))
    assert contexts["context_id"].tolist() == ["1"]
    assert bad_rows(report) == [(3, 2, "context", "invalid cp1252 byte 0x81 at column 7", "2")]


def test_line_numbers_with_crlf_blank_lines_and_a_byte_order_mark(tmp_path):
    path = tmp_path / "in.csv"
    path.write_bytes(b"\xef\xbb\xbfid,context\r\n1,one msg\r\n\r\n2,\r\n3,\"x\r\ny\"\r\n4,\r\n")
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1", "3"]  # the BOM is not part of the name "id"
    assert contexts["context"].tolist() == ["one msg", "x\r\ny"]
    assert [(b.line, b.row, b.reason) for b in report.bad] == [(4, 2, "empty context"), (7, 4, "empty context")]


def test_a_record_with_too_many_fields_is_a_bad_row_and_a_short_one_is_padded(tmp_path):
    """pandas refused the whole file ("Expected 2 fields in line 3, saw 3")."""
    path = tmp_path / "in.csv"
    path.write_text("id,context,answer\n1,first words,a1\n2,split, words,a2\n3,short row\n")
    contexts, report = read_contexts(dataset(path, human_response="answer"))
    assert contexts["context_id"].tolist() == ["1", "3"]
    assert contexts["human_response"].tolist() == ["a1", ""]
    assert bad_rows(report) == [(3, 2, "row", "too many fields: 4, the header has 3", "2")]


def test_an_unclosed_quote_is_a_bad_row_at_the_line_it_opens(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text('id,context\n1,good words\n2,"never closed\n3,swallowed\n4,also swallowed\n')
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1"]
    assert bad_rows(report) == [
        (3, 2, "row", "unclosed quote: the record runs from this line to the end of the file (line 5)", "2")]
    # Also when what it swallows is longer than the csv module's default field limit (128 KiB).
    path.write_text('id,context\n1,good words\n2,"never closed\n' + "3,swallowed words\n" * 20_000)
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1"] and report.bad[0].reason.startswith("unclosed quote")


def test_a_context_longer_than_the_csv_modules_default_field_limit(tmp_path):
    path = tmp_path / "in.csv"
    long = "word " * 60_000  # 300,000 characters
    path.write_text(f'id,context\n1,"{long}"\n')
    before = csv.field_size_limit()
    contexts, _ = read_contexts(dataset(path))
    assert len(contexts["context"].iloc[0]) == len(long.strip())
    assert csv.field_size_limit() == before  # the module-wide setting is put back


def test_duplicate_and_empty_header_names_are_named_as_pandas_names_them(tmp_path):
    path = tmp_path / "in.csv"
    path.write_text(",id,context,context\n0,1,first,second\n")
    contexts, _ = read_contexts(DatasetConfig(name="t", path=str(path), sensitivity="public",
                                              columns={"id": "id", "context": ["context", "context.1"]}))
    assert contexts["context"].tolist() == ["first\n\nsecond"]
    with pytest.raises(ConfigError, match=r"\['Unnamed: 0', 'id', 'context', 'context.1'\]"):
        read_contexts(dataset(path, human_response="nope"))


# --- JSON Lines and JSON ---------------------------------------------------------------------------


def test_a_malformed_jsonl_line_is_a_bad_row_with_its_line_number(tmp_path):
    """Regression: one malformed line stopped the job ("Expected object or value"), no line named."""
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"id": 1, "context": "first words"}\n'
        b"\n"                                                  # line 2: blank, skipped
        b'{"id": 2, "context": "cut off\n'                    # line 3: malformed
        b'[1, 2]\n'                                            # line 4: not an object
        b'{"id": 5, "context": "caf\xe9"}\n'                  # line 5: a latin-1 byte
        b'{"id": 6, "context": "last words"}\n'
    )
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1", "6"]
    assert bad_rows(report) == [
        (3, 2, "line", "malformed JSON at column 22: Unterminated string starting at", None),
        (4, 3, "line", "not a JSON object (list)", None),
        (5, 4, "line", "invalid UTF-8 byte 0xe9 at column 26", None),
    ]
    assert report.counts() == {"malformed JSON": 1, "not a JSON object (list)": 1, "invalid UTF-8 byte": 1}
    assert report.rows_read == 5 and report.rows_ok == 2
    contexts, report = read_contexts(dataset(path, encoding="latin-1"))
    assert contexts["context"].tolist() == ["first words", "café", "last words"]


def test_a_jsonl_file_of_only_bad_lines_reports_them_all(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("{oops\nnot json\n")
    contexts, report = read_contexts(dataset(path))
    assert contexts.empty
    assert [(b.line, b.reason.split(":")[0]) for b in report.bad] == [(1, "malformed JSON at column 2"),
                                                                      (2, "malformed JSON at column 1")]


def test_a_json_array_keeps_its_good_records(tmp_path):
    path = tmp_path / "in.json"
    path.write_bytes(b'[{"id": "1", "context": "fine words"}, "stray", {"id": "3", "context": "caf\xe9"}]')
    contexts, report = read_contexts(dataset(path))
    assert contexts["context_id"].tolist() == ["1"]
    assert bad_rows(report) == [(None, 2, "row", "not a JSON object (str)", None),
                                (None, 3, "context", "invalid UTF-8 byte 0xe9", "3")]
    contexts, _ = read_contexts(dataset(path, encoding="cp1252"))
    assert contexts["context"].tolist() == ["fine words", "café"]
