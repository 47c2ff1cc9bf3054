"""Hydra sweeps (jobs/core/sweeps.py, analysis/sweep.py): one run directory per point, every point run, and a summary that
puts the points side by side. No Ray: the summary is built from written tables, and the
end-to-end sweeps here are dry runs (they plan and exit)."""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from jobs.core.schemas import RESPONSES, SCORES
from jobs.core.store import TableStore
from analysis.sweep import method_headline, summarize, write_summary
from jobs.core.sweeps import (
    POINT_RECORD, distinguishing, find_points, point_run_dir, report, shared_run_dir, sweep_exit_code,
)
from jobs.core.modelconfig import GenerationOverrides
from tests.conftest import ROOT, run_job

ATTRS = {"Guidance": 4, "Informativeness": 2, "Relevance": 3, "Safety": 5,  # css = 3.5
         "Empathy": 1, "Helpfulness": 2, "Understanding": 3}               # ars = 2.0


# --- a point's run directory ------------------------------------------------------------------


def hydra_cfg(task: list[str], output_dir: str = "/sweeps/s/0-x", num: int = 0):
    return OmegaConf.create({"overrides": {"task": task}, "runtime": {"output_dir": output_dir},
                             "job": {"num": num, "name": "pipeline"}})


def test_a_point_runs_in_its_own_sweep_folder_not_in_the_shared_default():
    """Regression: every point of a sweep resolved the same `runs/<experiment>/<timestamp>`, so
    the second point found the first one's rows "already written" and sent nothing."""
    cfg = hydra_cfg(["generation.temperature=0.2"], output_dir="/sweeps/s/0-generation.temperature=0.2")
    assert point_run_dir(cfg, "runs/demo/20260101-000000") == "/sweeps/s/0-generation.temperature=0.2"


@pytest.mark.parametrize("override", ["run_dir=runs/a", "+run_dir=runs/a", "++run_dir=runs/a"])
def test_a_run_dir_set_for_the_point_is_honored(override):
    assert point_run_dir(hydra_cfg([override, "generation.temperature=0.2"]), "runs/a") == "runs/a"


@pytest.mark.parametrize("overrides, shared", [
    (["generation.temperature=0.2,0.7"], None),
    (["run_dir=runs/a,runs/b"], None),                   # one per point
    (["run_dir=runs/x/${hydra:job.num}"], None),         # differs per point
    (["run_dir=runs/x", "generation.temperature=0.2,0.7"], "runs/x"),
    (["+run_dir=runs/x"], "runs/x"),
])
def test_one_run_dir_for_every_point_is_found(overrides, shared):
    assert shared_run_dir(overrides) == shared


def test_the_override_that_varies_is_what_names_a_point():
    points = [{"overrides": ["experiment=e", "generation.temperature=0.2"]},
              {"overrides": ["experiment=e", "generation.temperature=0.7", "judges=[a]"]}]
    assert distinguishing(points) == ["generation.temperature", "judges"]


# --- the summary --------------------------------------------------------------------------------


def make_point(sweep: Path, num: int, overrides: list[str], code: int | None, *, error: str | None = None,
               responses: list[str] = (), judged: dict[str, float] | None = None) -> Path:
    """A point folder as a sweep leaves it: Hydra's overrides, the point's record (unless it
    never finished), and its tables."""
    point = sweep / f"{num}-{','.join(o for o in overrides if not o.startswith('experiment='))}"
    (point / ".hydra" / "pipeline").mkdir(parents=True)
    (point / ".hydra" / "pipeline" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (point / ".hydra" / "pipeline" / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "MULTIRUN"}}))
    if code is not None:
        (point / POINT_RECORD).write_text(json.dumps({
            "num": num, "job": "pipeline", "overrides": overrides, "run_dir": str(point), "exit_code": code,
            "error": error, "method": None, "judges": ["j1"]}))
    if responses:
        TableStore(point, RESPONSES, writer=True).append(
            [{"context_id": str(i), "model": "m1", "status": s} for i, s in enumerate(responses)])
    if judged is not None:
        rows = []
        for judge, scale in (("j1", 1.0), ("human", 0.0)):  # the human rows are not the point's judge
            for item, value in judged.items():
                rows.append({"subject_type": "response", "subject_id": "1|m1", "judge": judge,
                             "rubric": "mentalbench", "item": item, "context_id": "1", "responder": "m1",
                             "judge_type": "llm" if judge == "j1" else "human", "score": value * scale or 1.0,
                             "status": "ok"})
        TableStore(point, SCORES, writer=True).append(rows)
    return point


def test_the_summary_puts_every_point_side_by_side(tmp_path):
    sweep = tmp_path / "sweep"
    make_point(sweep, 0, ["experiment=e", "generation.temperature=0.2"], 0,
               responses=["ok", "error"], judged=ATTRS)
    make_point(sweep, 1, ["experiment=e", "generation.temperature=0.7"], 1, error="endpoint down",
               responses=["ok", "ok"])
    make_point(sweep, 2, ["experiment=e", "generation.temperature=1.0"], None)  # killed mid-run

    csv_path, md_path, frame = write_summary(sweep)
    assert list(frame["point"]) == [0, 1, 2]
    assert list(frame["sweep"]) == [f"generation.temperature={t}" for t in ("0.2", "0.7", "1.0")]
    assert list(frame["exit_code"].astype("object").where(frame["exit_code"].notna(), None)) == [0, 1, None]
    assert frame.loc[1, "error"] == "endpoint down" and "did not finish" in frame.loc[2, "error"]
    assert list(frame["responses_ok"][:2]) == [1, 2] and list(frame["responses_failed"][:2]) == [1, 0]
    # The rubric's own aggregates, over the point's judge only (the human rows would pull them to 1).
    assert frame.loc[0, "mentalbench.css [m1]"] == pytest.approx(3.5)
    assert frame.loc[0, "mentalbench.ars [m1]"] == pytest.approx(2.0)
    assert pd.isna(frame.loc[1, "mentalbench.css [m1]"])
    assert sweep_exit_code(frame) == 1

    assert len(pd.read_csv(csv_path)) == 3
    md = md_path.read_text()
    assert "| what | point 0 | point 1 | point 2 |" in md and "mentalbench.css [m1] | 3.500 |" in md and "| scores_ok | 14 |" in md


def test_a_sweep_of_clean_points_exits_0_and_a_shared_code_is_kept(tmp_path):
    ok = pd.DataFrame({"point": [0, 1], "exit_code": pd.array([0, 0], dtype="Int64")})
    assert sweep_exit_code(ok) == 0
    config_errors = pd.DataFrame({"point": [0, 1], "exit_code": pd.array([2, 2], dtype="Int64")})
    assert sweep_exit_code(config_errors) == 2
    mixed = pd.DataFrame({"point": [0, 1], "exit_code": pd.array([2, None], dtype="Int64")})
    assert sweep_exit_code(mixed) == 1


def test_a_point_another_job_is_still_running_is_not_this_jobs_failure(tmp_path):
    """Points submitted as separate Ray jobs share one sweep folder: the job that finishes first
    must not fail on a point that is still running elsewhere, and still names its own failures."""
    sweep = tmp_path / "sweep"
    mine = make_point(sweep, 0, ["generation.temperature=0.2"], 0)
    make_point(sweep, 1, ["generation.temperature=0.7"], None)  # running in another job
    frame = summarize(sweep)
    report(frame, sweep, launched={str(mine.resolve())})  # no SystemExit
    with pytest.raises(SystemExit) as stop:
        report(frame, sweep)  # rebuilt when every job is done: the unfinished point fails the sweep
    assert stop.value.code == 1


def test_an_unreadable_table_is_named_not_left_out(tmp_path):
    sweep = tmp_path / "sweep"
    point = make_point(sweep, 0, ["generation.temperature=0.2"], 0, responses=["ok"])
    (point / "responses" / "part-zz-broken.parquet").write_bytes(b"not parquet")
    frame = summarize(sweep)
    assert "numbers_error" in frame and "part-zz-broken" in frame.loc[0, "numbers_error"]


def test_points_are_found_however_deep_their_names_go(tmp_path):
    """An override value with a slash (dataset.path=data/x.csv) nests the point's folder."""
    sweep = tmp_path / "sweep"
    (sweep / "0-dataset.path=data").mkdir(parents=True)
    make_point(sweep / "0-dataset.path=data", 0, ["dataset.path=data/x.csv"], 0)
    assert [p["num"] for p in find_points(sweep)] == [0]


def test_a_single_run_under_the_sweep_folder_is_not_a_point(tmp_path):
    """hydra.sweep.dir=runs/<experiment> holds earlier single runs (`.hydra/`, mode RUN) too: they
    are not points that failed to finish."""
    sweep = tmp_path / "sweep"
    make_point(sweep, 0, ["generation.temperature=0.2"], 0)
    single = sweep / "20260101-000000" / ".hydra" / "pipeline"
    single.mkdir(parents=True)
    (single / "hydra.yaml").write_text(yaml.safe_dump({"hydra": {"mode": "RUN"}}))
    assert [p["num"] for p in find_points(sweep)] == [0]


def test_a_method_adds_its_headline_through_the_registry(monkeypatch, tmp_path):
    """A method registered from a folder of its own (`$EVALCLUSTER_SEARCHPATH`) names its
    headline function; the sweep summary finds it there."""
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "toy_report.py").write_text(
        "from pathlib import Path\n"
        "def headline(run_dir):\n    return {'toy.win_rate': 0.25, 'run': Path(run_dir).name}\n"
        "def build_report(run_dir, out_dir=None):\n    return Path(run_dir)\n")
    (tmp_path / "conf" / "method").mkdir(parents=True)
    (tmp_path / "conf" / "method" / "toymethod.yaml").write_text(
        "name: toymethod\nreport: toy_report:build_report\nheadline: toy_report:headline\n")
    monkeypatch.syspath_prepend(str(tmp_path / "code"))
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path / "conf"))
    assert method_headline(tmp_path, "toymethod") == {"toy.win_rate": 0.25, "run": tmp_path.name}
    assert method_headline(tmp_path, "nosuchmethod") == {}  # an unknown method has no numbers


# --- the config: every sampling key can be swept without `+` -----------------------------------


def compose(*overrides: str):
    with hydra.initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return hydra.compose(config_name="pipeline", overrides=list(overrides))


@pytest.mark.parametrize("experiment", [None, "mentalbench_demo", "sqpsych_demo", "sqpsych"])
def test_every_sampling_key_is_in_the_config(experiment):
    """Regression: `generation.temperature=0.2,0.7` failed (the key was not in the base config)
    and needed `+`, which a sweep's user does not guess."""
    cfg = compose(*([f"experiment={experiment}"] if experiment else []))
    groups = ["generation", "judge_generation"] + (["client_generation"] if "client_generation" in cfg else [])
    for group in groups:
        assert set(cfg[group]) == set(GenerationOverrides.model_fields), group
    cfg = compose(*([f"experiment={experiment}"] if experiment else []), "generation.temperature=0.3",
                  "judge_generation.seed=7", "generation.top_p=0.9")
    assert (cfg.generation.temperature, cfg.generation.top_p, cfg.judge_generation.seed) == (0.3, 0.9, 7)


def test_the_sqpsych_client_can_be_swept():
    cfg = compose("experiment=sqpsych", "client_generation.temperature=0.5")
    assert cfg.client_generation.temperature == 0.5


# --- sweeps as a user runs them (dry runs: no Ray, no model calls) -----------------------------


def test_every_point_runs_and_a_failed_point_is_a_row_not_the_end(tmp_path):
    """Regression: the entrypoint's sys.exit ended the sweep after its first point, exit 0.
    Point 0 is a config error (exit 2); point 1 still runs; the sweep exits 2."""
    sweep = tmp_path / "sweep"
    proc = run_job("jobs.pipeline", "-m", "experiment=mentalbench_demo", "dry_run=true", "dataset.limit=0,2",
                   f"hydra.sweep.dir={sweep}", check=False, timeout=300)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    points = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert points == ["0-dataset.limit=0,dry_run=True", "1-dataset.limit=2,dry_run=True"]
    frame = pd.read_csv(sweep / "sweep_summary.csv")
    assert list(frame["exit_code"]) == [2, 0]
    assert "dataset.limit" in frame.loc[0, "error"] and pd.isna(frame.loc[1, "error"])
    assert "generate: 2 (context, model) pairs" in proc.stdout and "sweep summary (2 point(s))" in proc.stdout
    assert "1 of 2 point(s) failed" in proc.stderr and f"hydra.sweep.dir={sweep.resolve()}" in proc.stderr
    record = json.loads((sweep / points[1] / POINT_RECORD).read_text())
    assert record["run_dir"] == str((sweep / points[1]).resolve()) and record["exit_code"] == 0


def test_one_run_dir_for_every_point_is_refused_before_anything_runs(tmp_path):
    sweep = tmp_path / "sweep"
    proc = run_job("jobs.pipeline", "-m", "experiment=mentalbench_demo", "dry_run=true",
                   f"run_dir={tmp_path / 'one'}", "generation.temperature=0.2,0.7", f"hydra.sweep.dir={sweep}",
                   check=False, timeout=300)
    assert proc.returncode == 2 and "would be shared by every point" in proc.stderr
    assert not (tmp_path / "one").exists() and not any(p.is_dir() for p in sweep.glob("*"))


def test_points_submitted_one_by_one_share_a_sweep_folder_and_one_summary(tmp_path):
    """cluster/launcher/README.md: each point its own `ray job submit` (a one-point sweep into a
    shared hydra.sweep.dir), then `python -m analysis.sweep DIR` puts them side by side."""
    sweep = tmp_path / "sweep"
    for t in ("0.2", "0.7"):
        run_job("jobs.pipeline", "-m", "experiment=mentalbench_demo", "dry_run=true", "dataset.limit=1",
                f"generation.temperature={t}", f"hydra.sweep.dir={sweep}", timeout=300)
    proc = run_job("analysis.sweep", str(sweep), timeout=120)
    assert "sweep summary (2 point(s))" in proc.stdout
    frame = pd.read_csv(sweep / "sweep_summary.csv")
    assert sorted(frame["overrides"].str.extract(r"temperature=(\S+)")[0]) == ["0.2", "0.7"]
    md = (sweep / "sweep_summary.md").read_text()
    assert "point 0-dataset.limit=1,dry_run=True,generation.temperature=0.2" in md


def test_a_run_dir_interpolated_per_point_is_not_refused(tmp_path):
    """`make demo` sweeps experiment=a,b,c with run_dir=runs/${experiment}/...: a different folder
    per point. Regression: the check read the override resolved against the config before the
    sweep (every point's experiment the default) and refused it as shared."""
    sweep = tmp_path / "sweep"
    proc = run_job("jobs.pipeline", "-m", "experiment=mentalbench_demo,sqpsych_demo", "dry_run=true",
                   f"run_dir={tmp_path}/" + "${experiment}", f"hydra.sweep.dir={sweep}", check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "would be shared" not in proc.stderr
    assert "generate: 2 (context, model) pairs" in proc.stdout  # MentalBench's point ran
    assert "== cohort ==" in proc.stdout  # and SQPsych's
