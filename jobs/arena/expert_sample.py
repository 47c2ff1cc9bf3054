"""The expert study's sample: sessions drawn from a run for human experts to rank, blinded.

    python -m jobs.arena.expert_sample RUN_DIR [--cards 30] [--seed 0] [--n-models 4 | --models m/psycho,...]
    python -m jobs.arena.expert_sample unblind RUN_DIR/expert_sample/sheet.csv --out rankings.csv
    python -m jobs.pipeline experiment=arena rankings.path=rankings.csv run_dir=RUN_DIR steps=[rankings,report]

The paper's experts ranked the sessions of 4 counselors on 30 cases, on the three scales and
overall. This draws `--cards` cards from the run's finished iteration-0 sessions, stratified by
theme (themes in turn, a card drawn at random within each, until enough), and for each card takes
the sessions of the chosen counselor/variant models (default: four of the run's, drawn with the
seed, as the paper's four counselors: four distinct counselors, then one variant of each;
`--n-models 0`: every counselor/variant; cards are those every chosen
model has a session of). Each session gets a blinded id (`S001`...: a random order, so the id says nothing
about the model). It writes `RUN_DIR/expert_sample/`:
- `sheet.csv`: one row per (card, blinded session, scale) with an empty `rank` (1 = best of the
  card's sessions) and an `expert` column for the expert to fill in (copy the sheet per expert);
- `transcripts.md`: each card and its sessions' transcripts under their blinded ids;
- `key.csv`: blinded id -> session, counselor, variant (keep it from the experts);
- `sample.json`: the seed, the cards per theme, the models, so the draw can be repeated.
`unblind` turns filled sheets back into the rankings CSV the rankings step imports.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import pandas as pd

from jobs.arena.rankings import RANKING_SCALES
from jobs.arena.schemas import CARDS, SESSIONS
from jobs.arena.sessions import render_transcript
from jobs.core.schemas import STATUS_OK
from jobs.core.store import TableStore

__all__ = ["PAPER_MODELS", "draw_cards", "draw_models", "unblind", "write_sample"]

FOLDER = "expert_sample"


def draw_cards(cards_by_theme: dict[str, list[str]], n: int, seed: int) -> list[str]:
    """`n` cards stratified by theme: each theme's cards shuffled with `seed`, then one card per
    theme in turn (themes in name order) until `n` or none left."""
    rng = random.Random(seed)
    pools = {t: sorted(c) for t, c in sorted(cards_by_theme.items())}
    for t in pools:
        rng.shuffle(pools[t])
    out: list[str] = []
    while len(out) < n and any(pools.values()):
        for t in pools:
            if pools[t] and len(out) < n:
                out.append(pools[t].pop(0))
    return out


PAPER_MODELS = 4  # the paper's experts ranked the sessions of four counselors


def draw_models(labels: list[str], n: int | None, seed: int) -> list[str]:
    """`n` distinct counselors of the run's `counselor/variant` labels drawn with `seed`, then one
    variant of each (sorted): the paper's experts ranked four different models, so two variants of
    one model are never both drawn. Every counselor when `n` is not below their number; every
    label when `n` is None or 0."""
    labels = sorted(labels)
    if not n:
        return labels
    by_counselor: dict[str, list[str]] = {}
    for label in labels:
        by_counselor.setdefault(label.rsplit("/", 1)[0], []).append(label)
    rng = random.Random(seed + 2)
    counselors = sorted(by_counselor)
    chosen = counselors if n >= len(counselors) else sorted(rng.sample(counselors, n))
    return sorted(rng.choice(by_counselor[c]) for c in chosen)


def write_sample(run_dir: Path, n_cards: int, seed: int, models: list[str] | None = None,
                 n_models: int | None = PAPER_MODELS) -> Path:
    """Draw the sample and write the sheet, transcripts, key and record; returns the folder.
    `models` names the counselor/variant labels; else `n_models` of the run's are drawn (the
    paper's four; None or 0: every one)."""
    sessions = TableStore(run_dir, SESSIONS).read()
    s = sessions[sessions["status"].eq(STATUS_OK) & sessions["iteration"].astype(int).eq(0)].copy()
    if s.empty:
        raise ValueError(f"{run_dir}: no finished iteration-0 session to sample")
    s["model"] = s["counselor"] + "/" + s["variant"]
    cards = TableStore(run_dir, CARDS).read(columns=["rendered", "theme"]).assign(
        card_id=lambda d: d["card_id"].astype(str))
    s["card_id"] = s["card_id"].astype(str)
    drawn_models = not models
    models = models or draw_models(list(s["model"].unique()), n_models, seed)
    have = s[s["model"].isin(models)].groupby("card_id")["model"].nunique()
    full = set(have[have == len(models)].index)  # cards every chosen model has a session of
    theme = dict(zip(cards["card_id"], cards["theme"].fillna("(no theme)")))
    by_theme: dict[str, list[str]] = {}
    for c in sorted(full):
        by_theme.setdefault(theme.get(c, "(no theme)"), []).append(c)
    drawn = draw_cards(by_theme, n_cards, seed)
    picked = s[s["card_id"].isin(drawn) & s["model"].isin(models)].sort_values(["card_id", "model"])
    order = list(range(1, len(picked) + 1))
    random.Random(seed + 1).shuffle(order)
    picked = picked.assign(blind_id=[f"S{k:03d}" for k in order])
    out = run_dir / FOLDER
    out.mkdir(parents=True, exist_ok=True)
    picked[["blind_id", "session_id", "card_id", "counselor", "variant"]].to_csv(out / "key.csv", index=False)
    sheet = [{"expert": "", "card_id": r["card_id"], "blind_id": r["blind_id"], "scale": sc, "rank": ""}
             for r in picked.sort_values(["card_id", "blind_id"]).to_dict("records") for sc in RANKING_SCALES]
    pd.DataFrame(sheet).to_csv(out / "sheet.csv", index=False)
    rendered = dict(zip(cards["card_id"], cards["rendered"]))
    lines = ["# Sessions to rank", "", "Rank the sessions of each card on each scale (1 = best) in sheet.csv.", ""]
    for card in drawn:
        lines += [f"## Card {card}", "", str(rendered.get(card, "")), ""]
        for r in picked[picked["card_id"] == card].sort_values("blind_id").to_dict("records"):
            lines += [f"### Session {r['blind_id']}", "", render_transcript(r["turns"]), ""]
    (out / "transcripts.md").write_text("\n".join(lines), encoding="utf-8")
    counts = pd.Series([theme.get(c, "(no theme)") for c in drawn]).value_counts().sort_index()
    (out / "sample.json").write_text(json.dumps({
        "seed": seed, "cards_requested": n_cards, "cards": drawn, "models": models,
        "models_drawn": (f"{len(models)} distinct counselor(s) of {n_models or 'every one'} asked, one variant each, "
                         "drawn with the seed" if n_models else "every counselor/variant") if drawn_models
        else "named (--models)",
        "cards_per_theme": {k: int(v) for k, v in counts.items()}, "sessions": len(picked)}, indent=2),
        encoding="utf-8")
    return out


def unblind(sheets: list[Path], key: Path) -> pd.DataFrame:
    """Filled sheets + the key -> rankings rows (expert, card_id, scale, counselor, variant, rank).

    Raises:
        ValueError naming the sheet and its line when a blinded id is not in the key."""
    k = pd.read_csv(key, dtype=str).set_index("blind_id")
    rows = []
    for sheet in sheets:
        d = pd.read_csv(sheet, dtype=str, keep_default_na=False)
        for line, r in enumerate(d.to_dict("records"), start=2):
            if r["blind_id"] not in k.index:
                raise ValueError(f"{sheet}, line {line}: blind_id {r['blind_id']!r} is not in {key}")
            s = k.loc[r["blind_id"]]
            rows.append({"expert": r["expert"], "card_id": r["card_id"], "scale": r["scale"],
                         "counselor": s["counselor"], "variant": s["variant"], "rank": r["rank"]})
    return pd.DataFrame(rows, columns=["expert", "card_id", "scale", "counselor", "variant", "rank"])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["unblind"]:
        p = argparse.ArgumentParser(prog="python -m jobs.arena.expert_sample unblind")
        p.add_argument("sheets", nargs="+", help="filled sheet.csv files (one per expert, or one by consensus)")
        p.add_argument("--key", default=None, help="key.csv (default: beside the first sheet)")
        p.add_argument("--out", required=True, help="the rankings CSV to write")
        a = p.parse_args(argv[1:])
        key = Path(a.key) if a.key else Path(a.sheets[0]).with_name("key.csv")
        unblind([Path(s) for s in a.sheets], key).to_csv(a.out, index=False)
        print(f"rankings: {a.out}")
        return 0
    p = argparse.ArgumentParser(prog="python -m jobs.arena.expert_sample", description=__doc__.split("\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--cards", type=int, default=30, help="cards to draw (the paper: 30)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--models", default=None, help="counselor/variant labels, comma-separated (default: "
                   "--n-models of them drawn with the seed)")
    p.add_argument("--n-models", type=int, default=PAPER_MODELS,
                   help=f"how many counselor/variant labels to draw when --models is not given (the paper: "
                        f"{PAPER_MODELS}; 0: every one the run has)")
    a = p.parse_args(argv)
    out = write_sample(Path(a.run_dir), a.cards, a.seed, a.models.split(",") if a.models else None, a.n_models)
    print(f"expert sample: {out} (sheet.csv, transcripts.md, key.csv, sample.json)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
