"""Which token count each utterance uses (issue 17 point 8): the model's own tokenizer where the
`tokens` step counted, the server's count for a model that strips no reasoning, else word and
punctuation pieces of the cleaned text. The models are chosen by model files on the search path."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.sqpsych.data import utterances
from analysis.sqpsych.stats import corpus_totals
from analysis.sqpsych.tokens import counter_table, counters_used, load_utterance_tokens, with_token_counts
from jobs.sqpsych.schemas import UTTERANCE_TOKENS
from jobs.core.store import TableStore
from tests.conftest import write_model_dir
from tests.unit.analysis.sqpsych.helpers import dialogue, write_dialogues


@pytest.fixture
def models(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    write_model_dir(conf, "plain", "http://127.0.0.1:9/v1")
    write_model_dir(conf, "thinker", "http://127.0.0.1:9/v1", reasoning={"strip": True})
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(conf))


def test_each_utterance_uses_the_first_count_that_applies(tmp_path, models):
    # therapist `thinker` (strips a trace; server counts 300 and 280 include it), client `plain`.
    d = dialogue("c1", "thinker", [("therapist", "How are you, today?", 300), ("client", "Not great.", 3),
                                   ("therapist", "Tell me more.", 280)], partner="plain")
    unknown = dialogue("c2", "ghost", [("therapist", "Hi there.", 40)], partner="plain")  # no model file
    run = write_dialogues(tmp_path / "run", [d, unknown])
    TableStore(run, UTTERANCE_TOKENS, writer=True).append(
        [{"dialogue_id": "c1|thinker", "turn": 1, "model": "thinker", "tokens": 6, "tokenizer": "x.gguf"}])
    utts = with_token_counts(utterances(pd.read_parquet(run / "dialogues")), load_utterance_tokens(run))
    got = utts.set_index(["dialogue_id", "turn"])
    # turn 1: the tokens step's count; turn 2: plain's server count; turn 3: "Tell", "me", "more", "." = 4
    assert got.loc[("c1|thinker", 1), ["tokens", "token_counter"]].tolist() == [6, "tokenizer"]
    assert got.loc[("c1|thinker", 2), ["tokens", "token_counter"]].tolist() == [3, "server"]
    assert got.loc[("c1|thinker", 3), ["tokens", "token_counter"]].tolist() == [4, "regex"]
    # no model file: the trace cannot be ruled out, so pieces: "Hi", "there", "." = 3
    assert got.loc[("c2|ghost", 1), ["tokens", "token_counter", "server_tokens"]].tolist() == [3, "regex", 40]
    table = counter_table(utts)
    assert table.loc["thinker", ["utterances", "tokenizer", "server", "regex", "tokens", "server_tokens"]].tolist() == [
        2, 1, 0, 1, 10, 580]
    # Table 8's corpus totals use the chosen counts: 6 + 3 + 4 for c1, 3 for c2.
    totals = corpus_totals(utts.assign(model=utts["model"]))
    assert totals.loc["thinker", "tokens"] == 13 and totals.loc["all", "tokens"] == 16


def test_counters_used_per_therapist_model(tmp_path, models):
    """The caveat beside the paper's Tables 2 and 8: per therapist model, which counts its
    dialogues' tokens came from (both agents' turns)."""
    d = dialogue("c1", "thinker", [("therapist", "How are you?", 300), ("client", "Not great.", 3),
                                   ("therapist", "Tell me more.", 280)], partner="plain")
    p = dialogue("c2", "plain", [("therapist", "Hi there.", 4)], partner="plain")
    run = write_dialogues(tmp_path / "run", [d, p])
    utts = with_token_counts(utterances(pd.read_parquet(run / "dialogues")), None)
    got = counters_used(utts)
    # thinker's dialogue: its two turns by pieces (it strips a trace), plain's reply by the server
    assert got.to_dict() == {"plain": "server 1", "thinker": "server 1, regex 2"}
    assert counters_used(utts.iloc[0:0]).empty
