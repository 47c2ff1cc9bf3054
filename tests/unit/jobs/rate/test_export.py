"""The export is the importer's CSV layout: importing it into a fresh copy of the run gives the
app's rows back (through `jobs.import_ratings` and SQPsych's expert importer, not our code)."""

from __future__ import annotations

import pandas as pd

from jobs.import_ratings import import_ratings
from jobs.import_ratings_config import RatingsImportConfig
from jobs.rate import RateConfig, RatingService
from jobs.sqpsych.experts import import_expert_scores
from jobs.core.configfiles import find_group_file, read_yaml
from tests.unit.jobs.rate.runs import SECRET_MODEL, mentalbench_run, sqpsych_run

KEY = ["subject_type", "subject_id", "judge", "rubric", "item"]


def rate_all(svc: RatingService) -> None:
    for rater in svc.study.raters:
        for pos, sid in enumerate(svc.order(rater), start=1):
            k = int(sid[1])  # the context's number: c2 -> 2, p3 -> 3
            out = svc.submit(rater, pos, {fi.field: str(fi.item.min + (k + i) % (fi.item.max - fi.item.min + 1))
                                          for i, fi in enumerate(svc.items)}, comment=f"{rater} on {k}")
            assert out.saved


def human(run_dir) -> pd.DataFrame:
    df = pd.read_parquet(run_dir / "scores")
    return df[df["judge_type"] == "human"].sort_values(KEY).reset_index(drop=True)


def preset(name: str, path) -> RatingsImportConfig:
    return RatingsImportConfig(**{**read_yaml(find_group_file("ratings", name)), "path": str(path)})


def test_mentalbench_export_imports_back_to_the_same_rows(tmp_path):
    svc = RatingService(RateConfig(run_dir=str(mentalbench_run(tmp_path / "a")), raters=["ana", "ben"], seed=2))
    rate_all(svc)
    [path] = svc.export(tmp_path / "out")
    csv = pd.read_csv(path, dtype=str)
    assert list(csv.columns) == ["conv_id", "rater", "rater_type", "responder", "Guidance", "Informativeness",
                                 "Relevance", "Safety", "Empathy", "Helpfulness", "Understanding"]
    # our responder names go back to the release's (the preset maps them again on import)
    assert set(csv["responder"]) == {"original_human_response", SECRET_MODEL}
    fresh = mentalbench_run(tmp_path / "b")
    report = import_ratings(preset("mentalbench_release", path), fresh)
    assert report.rows_written == 12 and report.rows_ok == 12
    a, b = human(svc.run_dir), human(fresh)
    cols = [*KEY, "context_id", "responder", "score", "status", "judge_type", "rubric_version"]
    pd.testing.assert_frame_equal(a[cols], b[cols])


def test_sqpsych_expert_sheet_export_imports_with_the_experts_preset(tmp_path):
    svc = RatingService(RateConfig(run_dir=str(sqpsych_run(tmp_path / "a")), raters=["ana", "ben"], seed=2))
    rate_all(svc)
    [path] = svc.export(tmp_path / "out")
    csv = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert list(csv.columns[:3]) == ["context_id", "expert", "model"] and csv.columns[-1] == "comment"
    assert (csv["C1_conciseness"] == "").all() and (csv["T1_key_beliefs"] != "").all()
    fresh = sqpsych_run(tmp_path / "b")
    import_expert_scores(preset("sqpsych_experts", path), fresh)
    a, b = human(svc.run_dir), human(fresh)
    ok = b[b["status"] == "ok"].reset_index(drop=True)
    cols = [*KEY, "context_id", "responder", "score", "explanation"]
    pd.testing.assert_frame_equal(a[cols], ok[cols])
    # the items the sheet does not ask are blank in the file: the importer records them as missing
    assert set(b.loc[b["status"] != "ok", "item"].str[0]) == {"C", "O"}
