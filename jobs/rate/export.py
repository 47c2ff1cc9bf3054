"""The app's ratings as CSV, in the layout `jobs.import_ratings` reads: one file per rubric.

The layout is the form's importer preset (`conf/ratings/<preset>.yaml`: which column holds the
context, the rater, the responder, each item, the comment), else the importer's default column
names. Responder names go back through the preset's `responder_map` (ours -> the source's), and
the preset's `context_id_prefix` is taken off, so importing the file with that preset gives the
same rows again. An item a form does not ask (an expert sheet's subset of the panel) is blank.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jobs.import_ratings_config import RatingsColumns, RatingsImportConfig
from jobs.rate.config import Form
from jobs.core.rubric import load_rubric
from jobs.core.schemas import JUDGE_TYPE_HUMAN
from jobs.core.configfiles import find_group_file, read_yaml, validated

__all__ = ["export_csv", "export_frames"]


def _preset(form: Form, rubric: str) -> RatingsImportConfig:
    data = read_yaml(find_group_file("ratings", form.export_preset)) if form.export_preset else {}
    data = {**data, "path": data.get("path", "-"), "rubric": data.get("rubric", rubric)}
    return validated(RatingsImportConfig, data, f"ratings preset {form.export_preset!r}")


def export_frames(human: pd.DataFrame, form: Form, raters: list[str]) -> dict[str, pd.DataFrame]:
    """rubric name -> one row per (subject, rater) in the importer's layout."""
    out = {}
    h = human[(human["judge_type"] == JUDGE_TYPE_HUMAN) & human["judge"].isin(raters)]
    for name in form.rubrics:
        rubric = load_rubric(name)
        cfg = _preset(form, name)
        cols: RatingsColumns = cfg.columns
        back = {}
        for source, ours in cfg.responder_map.items():
            back.setdefault(ours, source)
        d = h[h["rubric"] == name]
        rows = []
        for (sid, judge), g in d.groupby(["subject_id", "judge"], sort=True):
            first = g.iloc[0]
            cid = str(first["context_id"])
            if cfg.context_id_prefix and cid.startswith(cfg.context_id_prefix):
                cid = cid[len(cfg.context_id_prefix):]
            row = {cols.context_id: cid, cols.rater: judge,
                   cols.responder: back.get(first["responder"], first["responder"])}
            if cols.rater_type:
                row[cols.rater_type] = JUDGE_TYPE_HUMAN
            scores = dict(zip(g["item"], g["score"]))
            for it in rubric.items:
                if it.required:
                    v = scores.get(it.name)
                    row[cols.items.get(it.name, it.name)] = "" if v is None or pd.isna(v) else (
                        int(v) if float(v).is_integer() else v)
            if cols.explanation:
                comment = first["explanation"]
                row[cols.explanation] = "" if comment is None or pd.isna(comment) else comment
            rows.append(row)
        header = [cols.context_id, cols.rater, *([cols.rater_type] if cols.rater_type else []), cols.responder,
                  *(cols.items.get(it.name, it.name) for it in rubric.items if it.required),
                  *([cols.explanation] if cols.explanation else [])]
        out[name] = pd.DataFrame(rows, columns=header)
    return out


def export_csv(human: pd.DataFrame, form: Form, raters: list[str], folder: str | Path, study: str) -> list[Path]:
    """Write `export_frames` to `<folder>/<study>-<rubric>.csv`; returns the files."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, df in export_frames(human, form, raters).items():
        path = folder / f"{study}-{name}.csv"
        df.to_csv(path, index=False)
        paths.append(path)
    return paths
