"""`python -m jobs.demo`'s own parts without Ray: the overrides it takes and refuses, and the line
copier that keeps pipelines run at once from interleaving mid-line. The demo itself runs end to
end in tests/integration/test_pipeline.py."""

from __future__ import annotations

import io
import os

import pytest

from jobs.core.configfiles import ConfigError
from jobs.demo import Pipeline, _forward, main, shared_overrides


def test_the_cluster_and_server_overrides_are_the_demos_and_a_resume_gives_every_one_again():
    shared = shared_overrides(["serving.port=8210", "dataset.limit=1", "cluster.num_cpus=2", "verbose=true", "+foo=1"])
    assert shared == ["serving.port=8210", "cluster.num_cpus=2", "verbose=true"]
    p = Pipeline("arena_demo", "runs/arena_demo/20261126-1", ["dataset.limit=1", "serving.port=8210"])
    assert p.resume == ("python -m jobs.pipeline experiment=arena_demo run_dir=runs/arena_demo/20261126-1 "
                        "dataset.limit=1 serving.port=8210")


@pytest.mark.parametrize("bad, says", [("run_dir=/tmp/x", "runs/<experiment>/<time>"),
                                       ("+run_dir=x", "runs/<experiment>/<time>"),
                                       ("--verbose", "key=value"), ("limit", "key=value")])
def test_a_run_dir_or_a_non_override_is_refused_by_name(bad, says):
    with pytest.raises(ConfigError) as err:
        shared_overrides(["dataset.limit=1", bad])
    assert says in str(err.value)


def test_an_unknown_experiment_exits_2_before_anything_starts(capsys):
    assert main(["--experiments", "mentalbench_demo,no_such_demo"]) == 2
    assert "conf/experiment/no_such_demo.yaml" in capsys.readouterr().err


def _copied(chunks: list[bytes]) -> str:
    r, w = os.pipe()
    for c in chunks:
        os.write(w, c)
    os.close(w)
    out = io.StringIO()
    with os.fdopen(r, "rb") as stream:
        _forward(stream, "[a] ", out)
    return out.getvalue()


def test_whole_lines_are_copied_with_the_prefix_and_a_bar_only_in_its_final_state():
    # A bar's intermediate states are carriage-return separated; a chunk may end mid-line.
    text = _copied([b"== generate ==\npartial", b" line\n",
                    b"gen:  0%| 0/2\rgen: 50%| 1/2\rgen: 100%| 2/2 ok=2\n", b"\n", b"last without newline"])
    assert text.splitlines() == ["[a] == generate ==", "[a] partial line", "[a] gen: 100%| 2/2 ok=2",
                                 "[a] last without newline"]  # a crash's last words too


def test_a_misspelt_cluster_override_exits_2_naming_it_before_ray_starts(capsys):
    assert main(["--experiments", "mentalbench_demo", "serving.prot=8210"]) == 2
    assert "prot" in capsys.readouterr().err
