"""Expert rankings from CSV: the shipped example imports whole; bad rows are invalid rows naming
the line and the field (never dropped, never coerced); duplicates of a key are invalid; a re-run
replaces the file's rows; a card the run lacks is a warning, and the row is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.config import ClusterConfig
from jobs.arena import rankings
from jobs.arena.rankings import RankingsConfig
from jobs.arena.schemas import CARDS, RANKINGS
from jobs.core.store import TableStore
from jobs.core.configfiles import ConfigError
from serving.deploy import ServingConfig

RUN = dict(experiment="arena_test", cluster=ClusterConfig(runner="inline"), serving=ServingConfig())  # no Ray
HEADER = "expert,card_id,scale,counselor,variant,rank\n"


def config(tmp_path: Path, path: str | Path | None, **kw) -> RankingsConfig:
    return RankingsConfig(**RUN, run_dir=str(tmp_path / "run"), models=["qwen3-4b", "gemma3-270m"],
                          client_model="gemma3-270m", rankings=None if path is None else {"path": str(path), **kw})


def read(tmp_path: Path):
    return TableStore(tmp_path / "run", RANKINGS).read()


def write_cards(tmp_path: Path, ids: list[str]) -> None:
    TableStore(tmp_path / "run", CARDS, writer=True).append([{"card_id": c, "status": "ok"} for c in ids])


def test_nothing_configured_is_a_line_and_no_table(tmp_path, capsys):
    assert rankings.run(config(tmp_path, None)) == 0
    assert capsys.readouterr().out.strip() == "rankings: none configured"
    assert not (tmp_path / "run" / "rankings").exists()


def test_the_shipped_example_imports_whole(tmp_path, capsys):
    write_cards(tmp_path, ["17", "19"])
    assert rankings.run(config(tmp_path, "data/demo/arena_rankings_example.csv")) == 0
    df = read(tmp_path)
    assert len(df) == 32 and (df["status"] == "ok").all() and set(df["source"]) == {"arena_rankings_example.csv"}
    assert set(df["expert"]) == {"expert_a", "expert_b"} and set(df["scale"]) == {"client", "overall"}
    # Each expert ranks the four sessions of a card on a scale 1..4.
    assert (df.groupby(["expert", "card_id", "scale"])["rank"].apply(sorted).apply(list) == [[1, 2, 3, 4]] * 8).all()
    assert "warning" not in capsys.readouterr().err


def test_bad_rows_are_invalid_rows_naming_line_and_field(tmp_path, capsys):
    path = tmp_path / "ranks.csv"
    path.write_text(HEADER + "\n".join([
        "e1,c1,client,qwen3-4b,vanilla,1",
        "e1,c1,client,qwen3-4b,psycho,2",
        "e1,c1,clients,qwen3-4b,vanilla,1",   # unknown scale
        "e1,c1,client,gemma3-270m,vanilla,0",  # rank below 1
        "e1,c1,client,gemma3-270m,psycho,1.5",  # not a whole number
        ",c1,overall,qwen3-4b,vanilla,1",    # no expert
        "e1,c1,client,qwen3-4b,vanilla,3",   # duplicate of line 2
        "e1,c1,overall,qwen3-4b,vanilla,2.0",  # a spreadsheet's whole number: ok
    ]) + "\n", encoding="utf-8")
    assert rankings.run(config(tmp_path, path)) == 1
    df = read(tmp_path).set_index("line")
    assert list(df.loc[[2, 3, 9], "status"]) == ["ok"] * 3 and df.loc[9, "rank"] == 2
    assert df.loc[4, "error"] == "ranks.csv line 4: field scale: 'clients' is not one of client, supervisor, counselor, overall"
    assert df.loc[5, "error"] == "ranks.csv line 5: field rank: 0 is below 1 (1 = the best)"
    assert df.loc[6, "error"] == "ranks.csv line 6: field rank: '1.5' is not a whole number"
    assert df.loc[7, "error"] == "ranks.csv line 7: field expert: empty expert"
    assert df.loc[8, "error"] == "ranks.csv line 8: duplicate of line 2 (same expert, card_id, scale, counselor, variant)"
    # Recorded as written, never coerced; the first row of a key keeps its rank.
    assert df.loc[2, "rank"] == 1 and df.loc[8, "rank"] == 3 and df.loc[8, "expert"] == "e1@line-8"
    assert len(df) == 8 and (df.loc[[4, 5, 6, 7, 8], "status"] == "invalid").all()
    captured = capsys.readouterr()
    assert "8 row(s), 3 ok, 5 invalid" in captured.out
    assert "warning: rankings name 1 card(s) the run has no card for (c1)" in captured.err


def test_a_rerun_replaces_the_files_rows(tmp_path, capsys):
    path = tmp_path / "ranks.csv"
    path.write_text(HEADER + "e1,c1,client,qwen3-4b,vanilla,1\ne1,c1,client,qwen3-4b,psycho,x\n", encoding="utf-8")
    assert rankings.run(config(tmp_path, path)) == 1
    path.write_text(HEADER + "e1,c1,client,qwen3-4b,vanilla,2\ne1,c1,client,qwen3-4b,psycho,1\n", encoding="utf-8")
    assert rankings.run(config(tmp_path, path)) == 0
    df = read(tmp_path)
    assert len(df) == 2 and (df["status"] == "ok").all() and sorted(df["rank"]) == [1, 2]
    assert "replacing 2 row(s) of an earlier import" in capsys.readouterr().out


def test_mapped_columns_and_a_missing_column(tmp_path):
    path = tmp_path / "ranks.csv"
    path.write_text("rater,client,perspective,model,prompt,position\nr1,c1,supervisor,qwen3-4b,psycho,1\n",
                    encoding="utf-8")
    columns = {"expert": "rater", "card_id": "client", "scale": "perspective", "counselor": "model",
               "variant": "prompt", "rank": "position"}
    assert rankings.run(config(tmp_path, path, columns=columns)) == 0
    assert read(tmp_path).iloc[0][["expert", "scale", "rank"]].tolist() == ["r1", "supervisor", 1]
    with pytest.raises(ConfigError, match=r"no column 'expert' \(rankings.columns.expert\), 'card_id'.*the file has"):
        rankings.run(config(tmp_path, path))
    with pytest.raises(ConfigError, match=r"rankings file .*missing.csv: not found"):
        rankings.run(config(tmp_path, tmp_path / "missing.csv"))


def test_dry_run_checks_and_writes_nothing(tmp_path):
    path = tmp_path / "ranks.csv"
    path.write_text(HEADER + "e1,c1,overall,qwen3-4b,vanilla,1\n", encoding="utf-8")
    assert rankings.run(config(tmp_path, path).model_copy(update={"dry_run": True})) == 0
    assert not (tmp_path / "run" / "rankings").exists()
