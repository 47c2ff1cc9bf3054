"""The cards step: card sources (posts or a cards file), the cards-file path end to end into a run
directory (ok and invalid rows, exit codes, a fixed file on re-run), the extraction stage on
canned answers (ok / parse_error / invalid / error), the data-governance refusal before any call,
and the posts path end to end against the loopback fake endpoint with the Ray runner swapped for
an in-process call of the same stage (resume included)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from cluster.config import ClusterConfig
from jobs.arena import cards
from jobs.arena.cardfile import load_card_file
from jobs.arena.cards import CardSourceConfig, CardsConfig, CardStage, answer_object
from jobs.arena.schemas import CARDS
from jobs.arena.taxonomy import load_taxonomy
from jobs.stage import endpoints_to_spec
from jobs.core.store import TableStore
from serving.client import ChatResult, Endpoint
from jobs.core.configfiles import ConfigError, load_model
from serving.deploy import ServingConfig
from serving.governance import DataGovernanceError
from tests.conftest import ROOT, write_model_dir
from tests.fakes.openai_server import FakeServer

RUN = dict(experiment="arena_test", cluster=ClusterConfig(runner="inline"), serving=ServingConfig())  # no Ray
CARD = {
    "age": 29, "gender": "male", "occupation": "teacher", "marital_status": "single",
    "cultural_background": "unknown", "personality_traits": ["shy"], "emotional_state": "tense",
    "current_distress": "Afraid of talking to new people.", "distress_description": "He freezes at parties.",
    "theme": "interpersonal", "topic": "social_anxiety",
}


def shipped(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf" / "dataset" / f"{name}.yaml").read_text())


def config(tmp_path: Path, dataset: dict, **kw) -> CardsConfig:
    return CardsConfig(**RUN, run_dir=str(tmp_path / "run"), models=["counselor"], client_model="extractor1",
                       dataset=dataset, **kw)


def cards_of(tmp_path: Path):
    return TableStore(tmp_path / "run", CARDS).read().set_index("card_id")


# --- the sources ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, kind, limit", [("arena_counselchat", "posts", 100),
                                               ("arena_counselchat_demo", "posts", 2),
                                               ("arena_cards_example", "cards", None)])
def test_shipped_sources_validate(name, kind, limit):
    ds = CardSourceConfig(**shipped(name))
    assert (ds.kind, ds.limit, ds.sensitivity) == (kind, limit, "public")
    if kind == "posts":
        assert ds.posts_dataset().columns.context == ds.columns.context


def test_a_source_that_does_not_say_is_restricted_and_posts_need_a_text_column():
    assert CardSourceConfig(name="x", kind="cards", path="x.json").sensitivity == "restricted"
    with pytest.raises(ValueError, match="kind posts needs columns.context"):
        CardSourceConfig(name="x", kind="posts", path="x.csv")
    with pytest.raises(ValueError, match=r"card_columns maps to unknown card fields \['mood'\]"):
        CardSourceConfig(name="x", kind="cards", path="x.csv", card_columns={"Mood": "mood"})


# --- a cards file -----------------------------------------------------------------------------------


def test_the_demo_cards_file_loads_every_card_faithfully_tied_to_its_post(tmp_path):
    assert cards.run(config(tmp_path, shipped("arena_cards_example"))) == 0
    df = cards_of(tmp_path)
    first_six = pd.read_csv(ROOT / "data/demo/counselchat_demo.csv", dtype=str).head(6)
    posts = {r["question_id"]: r for r in first_six.to_dict("records")}
    assert sorted(df.index) == sorted(posts) and (df["status"] == "ok").all()
    assert set(df["sensitivity"]) == {"public"} and set(df["extractor"]) == {"file"}
    for cid, row in df.iterrows():
        assert row["source_id"] == cid and row["post"].startswith(posts[cid]["title"].strip())
        assert row["rendered"].startswith("Name-less profile:") and json.loads(row["card"])["card_id"] == cid


def write_json_cards(path: Path, rows: list[dict]) -> dict:
    path.write_text(json.dumps(rows), encoding="utf-8")
    return dict(name="mine", kind="cards", path=str(path), sensitivity="public")


def test_bad_cards_are_invalid_rows_naming_card_file_row_and_field(tmp_path, capsys):
    rows = [{"card_id": "a", **CARD},
            {"card_id": "b", **{k: v for k, v in CARD.items() if k != "emotional_state"}},
            {"card_id": "c", **CARD, "topic": "breakup_recovery"},
            {"card_id": "a", **CARD},
            "not a card"]
    ds = write_json_cards(tmp_path / "cards.json", rows)
    assert cards.run(config(tmp_path, ds)) == 1
    df = cards_of(tmp_path)
    assert df.loc["a", "status"] == "ok" and df.loc["a", "sensitivity"] == "public"
    f = str(tmp_path / "cards.json")
    assert df.loc["b", "error"] == f"card b (file {f}, row 2): field emotional_state: missing (a required field)"
    assert df.loc["c", "error"].startswith(f"card c (file {f}, row 3): field topic: topic 'breakup_recovery' "
                                           "belongs to theme 'love'")
    assert df.loc["a@row-4", "error"] == f"card a (file {f}, row 4): field card_id: duplicate card id (an earlier row has it)"
    assert df.loc["?@row-5", "error"] == f"card ? (file {f}, row 5): field row: not a JSON object (str)"
    assert (df.drop(index="a")["status"] == "invalid").all() and df.drop(index="a")["card"].isna().all()
    out = capsys.readouterr().out
    assert "5 card(s) read, 1 ok, 4 invalid" in out and "cards: 1 ok, 4 invalid, 0 failed" in out

    # The file fixed: the invalid cards are checked again, the ok one is kept as it was.
    write_json_cards(tmp_path / "cards.json", [{"card_id": "a", **CARD}, {"card_id": "b", **CARD}])
    assert cards.run(config(tmp_path, ds)) == 0
    again = cards_of(tmp_path)
    assert sorted(again.index) == ["a", "b"] and (again["status"] == "ok").all()


def test_a_csv_of_cards_through_a_column_mapping(tmp_path):
    path = tmp_path / "cards.csv"
    head = "id,Age,Sex,Job,Status,Culture,Traits,Mood,Problem,Story,Theme,Topic,Post\n"
    path.write_text(head + '7,31,female,,married,Korean,"warm; anxious",low,Fights.,"Two lines\nof story.",marriage,'
                    'marital_conflict,We fight\n8,,male,,,,shy,,x,y,marriage,marital_conflict,\n', encoding="utf-8")
    mapping = {"Age": "age", "Sex": "gender", "Job": "occupation", "Status": "marital_status",
               "Culture": "cultural_background", "Traits": "personality_traits", "Mood": "emotional_state",
               "Problem": "current_distress", "Story": "distress_description", "Theme": "theme", "Topic": "topic"}
    ds = dict(name="csv", kind="cards", path=str(path), columns={"id": "id", "context": "Post"},
              card_columns=mapping)
    assert cards.run(config(tmp_path, ds)) == 1
    df = cards_of(tmp_path)
    assert df.loc["7", "personality_traits"] == "warm; anxious" and df.loc["7", "occupation"] == "unknown"
    assert df.loc["7", "post"] == "We fight" and df.loc["7", "sensitivity"] == "restricted"  # the file did not say
    # The record spans lines 2-3: the next one starts on line 4.
    assert df.loc["8", "error"].startswith(f"card 8 (file {path}, row 2 (line 4)): field cultural_background: empty")
    assert "field emotional_state: empty (a required field)" in df.loc["8", "error"]
    with pytest.raises(ConfigError, match=r"no column 'Mood2' for dataset.card_columns \(Mood2 -> emotional_state\)"):
        cards.run(config(tmp_path, {**ds, "card_columns": {**mapping, "Mood2": "emotional_state"}}))


def test_a_file_that_cannot_be_read_is_a_config_error_naming_it(tmp_path):
    with pytest.raises(ConfigError, match=r"cards file .*nope.json: not found"):
        cards.run(config(tmp_path, dict(name="x", kind="cards", path=str(tmp_path / "nope.json"))))
    (tmp_path / "broken.json").write_text('[{"card_id": "a",\n  "age": }]', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"broken.json: not valid JSON at line 2, column"):
        cards.run(config(tmp_path, dict(name="x", kind="cards", path=str(tmp_path / "broken.json"))))
    (tmp_path / "obj.json").write_text('{"card_id": "a"}', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"a JSON cards file is a list of objects, one per card; it holds a dict"):
        cards.run(config(tmp_path, dict(name="x", kind="cards", path=str(tmp_path / "obj.json"))))
    assert not (tmp_path / "run" / "cards").exists()


def test_limit_counts_good_cards(tmp_path):
    rows = [{"card_id": "a", **CARD}, {"card_id": "b"}, {"card_id": "c", **CARD}, {"card_id": "d", **CARD}]
    ds = CardSourceConfig(**write_json_cards(tmp_path / "c.json", rows), limit=2)
    items, _ = load_card_file(ds, load_taxonomy())
    assert [(i.key, i.card is not None) for i in items] == [("a", True), ("b", False), ("c", True)]


# --- the extraction stage on canned answers ---------------------------------------------------------


class CannedClient:
    """Stands in for the stage's ChatClient: answers from a list, records the requests."""

    def __init__(self, real, answers):
        self.real, self.answers, self.requests = real, list(answers), []

    @property
    def models(self):
        return self.real.models

    def endpoint(self, name):
        return self.real.endpoint(name)

    async def chat(self, model, messages, params, *, response_format=None, sensitivity, request_key=None):
        self.requests.append({"messages": messages, "response_format": response_format})
        return self.answers.pop(0)


def stage(tmp_path, monkeypatch, answers, **model_fields) -> CardStage:
    write_model_dir(tmp_path / "conf", "extractor1", "http://127.0.0.1:9/v1", **model_fields)
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    model = load_model("extractor1")
    st = CardStage(endpoints_to_spec({model.name: Endpoint(model, model.base_url)}), 1.0, "public",
                   taxonomy=load_taxonomy().model_dump(), generation_overrides={"temperature": 0.0, "max_tokens": 400},
                   source="posts", prompt_version="card-extract-x", run_id="r1")
    st.client = CannedClient(st.client, answers)
    return st


ROW = {"card_id": "17", "source_id": "17", "post": "I get nervous.", "model": "extractor1", "prompt": "PROMPT"}


@pytest.mark.parametrize("content, status, error", [
    ("```json\n" + json.dumps(CARD) + "\n```", "ok", None),
    ("Here is the card: " + json.dumps({"card": CARD}) + " Hope it helps.", "ok", None),
    ("The client seems anxious.", "parse_error", "no JSON card object in the extractor's answer"),
    (json.dumps({**CARD, "topic": "job_loss"}), "invalid",
     "card 17 (extractor extractor1's answer to post 17): field topic: topic 'job_loss' belongs to theme 'career'"),
    (json.dumps({**CARD, "age": 0}), "invalid", "card 17 (extractor extractor1's answer to post 17): field age: 0 is"),
])
def test_the_stage_reads_answers_leniently_and_checks_them(tmp_path, monkeypatch, content, status, error):
    st = stage(tmp_path, monkeypatch, [ChatResult(status="ok", content=content, attempts=1, finish_reason="stop")])
    out = asyncio.run(st.process_row(dict(ROW)))
    assert out["status"] == status and out["raw"] == content
    assert (out["error"] or "").startswith(error or "") and (error is not None) == (out["error"] is not None)
    if status == "ok":
        assert out["topic"] == "social_anxiety" and out["personality_traits"] == "shy" and "Social anxiety" in out["rendered"]
    else:
        assert out.get("card") is None
    sent = st.client.requests[0]
    assert sent["messages"] == [{"role": "user", "content": "PROMPT"}]
    # An external extractor gets the schema without length caps (strict mode rejects them).
    assert sent["response_format"]["json_schema"]["name"] == "npc_card" and "maxLength" not in json.dumps(sent["response_format"])


def test_a_failed_call_is_an_error_row_and_a_local_model_gets_the_capped_schema(tmp_path, monkeypatch):
    st = stage(tmp_path, monkeypatch, [ChatResult(status="error", error="after 3 attempt(s): APIConnectionError")],
               locality="local")
    out = asyncio.run(st.process_row(dict(ROW)))
    assert (out["status"], out["error"], out["extractor"]) == ("error", "after 3 attempt(s): APIConnectionError", "extractor1")
    assert "maxLength" in json.dumps(st.client.requests[0]["response_format"])
    answer = answer_object('noise {"x": 1} then {"theme": "emotion"}')
    assert answer == {"theme": "emotion"}


# --- posts -> cards ---------------------------------------------------------------------------------


def write_posts(tmp_path: Path, sensitivity: str | None = "public") -> dict:
    path = tmp_path / "posts.csv"
    path.write_text("qid,title,body\np1,Nervous in therapy,I get shaky every session.\n"
                    "p2,Lonely,Since the move I have nobody to talk to.\np3,,\n", encoding="utf-8")
    ds = dict(name="posts", kind="posts", path=str(path), columns={"id": "qid", "context": ["title", "body"]},
              min_context_words=1)
    return ds if sensitivity is None else {**ds, "sensitivity": sensitivity}


@pytest.mark.parametrize("sensitivity", ["restricted", None])
def test_restricted_posts_never_reach_an_external_extractor(tmp_path, monkeypatch, sensitivity):
    """Refused before any request, and before anything is written to the run."""
    with FakeServer() as server:
        write_model_dir(tmp_path / "conf", "extractor1", server.base_url)
        monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
        with pytest.raises(DataGovernanceError, match="refused: dataset 'posts' is 'restricted'"):
            cards.run(config(tmp_path, write_posts(tmp_path, sensitivity)))
        assert server.stats()["requests"] == 0
    assert not (tmp_path / "run" / "cards").exists() and not (tmp_path / "run" / "run_inputs.json").exists()


def test_posts_become_cards_and_a_rerun_sends_nothing(tmp_path, monkeypatch, capsys):
    with FakeServer() as server:
        write_model_dir(tmp_path / "conf", "extractor1", server.base_url)
        monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
        cfg = config(tmp_path, write_posts(tmp_path))
        assert cards.run(cfg) == 0
        sent = server.log_lines()
        assert len(sent) == 2 and {s["request_key"] for s in sent} == {"card|p1|extractor1", "card|p2|extractor1"}
        prompt = next(s["content"] for s in sent if s["request_key"] == "card|p2|extractor1")
        assert "Lonely\n\nSince the move I have nobody to talk to." in prompt
        assert "emotion (Emotion): persistent_sadness," in prompt and "{taxonomy}" not in prompt
        assert cards.run(cfg) == 0 and len(server.log_lines()) == 2  # resumed: nothing sent again
    df = cards_of(tmp_path)
    # The fake answers each enum's first value: self_growth / low_self_esteem, a consistent pair.
    assert sorted(df.index) == ["p1", "p2"] and (df["status"] == "ok").all()
    assert set(df["theme"]) == {"self_growth"} and set(df["extractor"]) == {"extractor1"}
    assert df.loc["p1", "post"] == "Nervous in therapy\n\nI get shaky every session." and df.loc["p1", "source_id"] == "p1"
    assert set(df["sensitivity"]) == {"public"} and set(df["temperature"]) == {0.0} and set(df["max_tokens"]) == {400}
    assert df["prompt_version"].str.startswith("card-extract-").all()
    out = capsys.readouterr().out
    assert "3 rows read, 2 usable, 1 bad" in out and "cards: 2 ok, 0 invalid, 0 failed in" in out
    inputs = json.loads((tmp_path / "run" / "run_inputs.json").read_text())["cards"]
    assert inputs["decides"]["dataset"] == "posts" and inputs["decides"]["taxonomy"] == "arena-topics-v1"


def test_failed_extractions_are_rows_and_are_asked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    with FakeServer(always_fail="500") as server:
        write_model_dir(tmp_path / "conf", "extractor1", server.base_url, max_retries=0)
        assert cards.run(config(tmp_path, write_posts(tmp_path))) == 1
    assert (cards_of(tmp_path)["status"] == "error").all()
    with FakeServer() as server:
        write_model_dir(tmp_path / "conf", "extractor1", server.base_url)
        assert cards.run(config(tmp_path, write_posts(tmp_path))) == 0
        assert len(server.log_lines()) == 2
    assert (cards_of(tmp_path)["status"] == "ok").all()


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, monkeypatch, capsys):
    write_model_dir(tmp_path / "conf", "extractor1", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    cfg = config(tmp_path, write_posts(tmp_path), dry_run=True, extractor_model="extractor1")
    assert cards.run(cfg) == 0
    out = capsys.readouterr().out
    assert "cards: 2 post(s) of posts, 0 already carded, 2 to extract with extractor1" in out
    assert "extractor1" in out and "800" in out  # 2 calls x 400 max tokens
    assert not (tmp_path / "run").exists()
