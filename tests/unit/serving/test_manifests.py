"""`python -m serving.manifests`: the experiment's models, packing, rendering, drift check."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
import yaml

from serving.capacity import FitError
from jobs.core.configfiles import CONF_DIR, ConfigError, load_model
from serving.manifests import (
    compose, dns_name, gpu_nodes, main, named_models, pack_nodes, render, render_args, served_gpu_models,
)
from serving.vllm_app import llm_config_kwargs
from tests.conftest import ROOT, job_env


def test_named_models_follow_the_pipeline_composition():
    cfg = compose(["experiment=mentalbench"])
    names = named_models(cfg)
    # The experiment's responders, then its judges, each once, in the file's order.
    assert names[:2] == ["gpt-4o", "gpt-4o-mini"]
    assert names[-3:] == ["o4-mini", "claude-3-7-sonnet", "gemini-2-5-flash"]
    assert len(names) == len(set(names)) == 12
    # An override on the command line changes the rendered set, as it changes the job's.
    assert named_models(compose(["experiment=mentalbench", "models=[qwen3-4b]", "judges=[gpt-4o]"])) == [
        "qwen3-4b", "gpt-4o"]


def test_ratings_maps_are_not_models_the_experiment_calls():
    """The demo imports released ratings whose map names model files: those are not called."""
    assert named_models(compose(["experiment=mentalbench_demo"])) == ["gemma3-270m"]


def test_unknown_model_names_the_key():
    with pytest.raises(ConfigError, match=r"`models` names 'no-such-model'"):
        named_models({"models": ["no-such-model"]})
    with pytest.raises(ConfigError, match=r"`dialogue.therapist_model` names"):
        named_models({"dialogue": {"therapist_model": "nope"}})


def test_the_models_a_runs_finetune_step_writes_are_not_hosted_in_advance():
    """sqpsych_finetune_demo's single_turn compares `smollm2-cpu-gemma3-270m`, a model file its
    own finetune step writes into the run: skipped, while a misspelt name still fails."""
    cfg = compose(["experiment=sqpsych_finetune_demo"])
    assert cfg["single_turn"]["model"] == "smollm2-cpu-gemma3-270m"
    assert named_models(cfg) == ["gemma3-270m"]
    with pytest.raises(ConfigError, match=r"`single_turn.model` names 'smollm2-cpu-gemma3-270m'"):
        named_models({**cfg, "steps": [s for s in cfg["steps"] if s != "finetune"]})
    with pytest.raises(ConfigError, match=r"`single_turn.model` names 'smolm2-cpu-gemma3-270m'"):
        named_models({**cfg, "single_turn": {**cfg["single_turn"], "model": "smolm2-cpu-gemma3-270m"}})


def test_compose_error_is_a_config_error():
    with pytest.raises(ConfigError, match="no_such_experiment"):
        compose(["experiment=no_such_experiment"])


@pytest.mark.parametrize("bundles,per_node,nodes", [
    ([], 8, 0), ([1] * 8, 8, 1), ([1] * 9, 8, 2), ([4, 4, 4], 8, 2), ([8, 1], 8, 2),
    ([4, 2, 2, 4, 2, 2], 8, 2), ([2, 2, 2, 2, 2], 8, 2),
])
def test_pack_nodes_never_splits_a_replica(bundles, per_node, nodes):
    assert pack_nodes(bundles, per_node) == nodes


def test_gpu_groups_are_sized_from_replicas_and_tensor_parallelism():
    models = [load_model(n) for n in ("llama-3-3-70b-instruct", "qwen2-5-72b-instruct", "qwen3-4b")]
    # min: 4 + 4 + 1 GPUs -> two nodes (the two TP4 replicas fill one); max: 2x4 + 2x4 + 2x1 -> 3.
    assert gpu_nodes(models) == {"A100-80G": (2, 3)}


def test_a_model_that_cannot_fit_stops_the_render(tmp_path, monkeypatch):
    # A model file of one's own (found first on $EVALCLUSTER_SEARCHPATH): the 70B at TP 1, 131 GiB on one A100.
    data = yaml.safe_load((CONF_DIR / "model" / "llama-3-3-70b-instruct.yaml").read_text())
    data["resources"]["tensor_parallel_size"] = 1
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "llama-3-3-70b-instruct.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setenv("EVALCLUSTER_SEARCHPATH", str(tmp_path))
    with pytest.raises(FitError, match=r"set resources.tensor_parallel_size to 2"):
        served_gpu_models({"models": ["llama-3-3-70b-instruct"]})


def test_rendered_rayservice_is_the_deploy_config():
    doc = yaml.safe_load(render(["rayservice", "experiment=mentalbench", "models=[qwq-32b,qwen3-4b]"]))
    llm_configs = yaml.safe_load(doc["spec"]["serveConfigV2"])["applications"][0]["args"]["llm_configs"]
    assert llm_configs == [llm_config_kwargs(load_model("qwq-32b")), llm_config_kwargs(load_model("qwen3-4b"))]
    gpu = doc["spec"]["rayClusterConfig"]["workerGroupSpecs"][-1]
    assert (gpu["minReplicas"], gpu["maxReplicas"]) == (1, 2)  # min 2+1 GPUs; max 4x2 + 2x1 = 10
    assert doc["metadata"]["name"] == "mentalbench-models"


def test_rayjob_carries_the_overrides_and_the_run_id():
    doc = yaml.safe_load(render(["rayjob", "--run-id", "r7", "experiment=mentalbench",
                                 "generation.temperature=0.2"]))
    assert doc["metadata"]["name"] == "mentalbench-r7"
    assert doc["spec"]["entrypoint"] == ("python -m jobs.pipeline experiment=mentalbench "
                                         "generation.temperature=0.2 cluster=auto "
                                         "run_dir=/mnt/runs/mentalbench/r7")


def test_an_experiment_without_vllm_models_has_no_rayservice():
    with pytest.raises(ConfigError, match="names no vLLM model"):
        render(["rayservice", "experiment=mentalbench_demo"])


def test_dns_name():
    assert dns_name("mentalbench_demo-models") == "mentalbench-demo-models"
    with pytest.raises(ConfigError):
        dns_name("_")


def test_check_and_write_find_and_fix_drift(tmp_path, capsys):
    shutil.copy(ROOT / "k8s" / "networkpolicy.yaml", tmp_path / "np.yaml")
    (tmp_path / "hand-written.yaml").write_text("kind: ConfigMap\n")  # no header: left alone
    assert main(["--check", str(tmp_path)]) == 0
    path = tmp_path / "np.yaml"
    path.write_text(path.read_text().replace("8265", "8266"))
    assert main(["--check", str(tmp_path)]) == 1
    assert "np.yaml" in capsys.readouterr().err
    assert main(["--write", str(tmp_path)]) == 0
    assert main(["--check", str(tmp_path)]) == 0
    assert render_args(path) == ["networkpolicy"]
    assert (tmp_path / "hand-written.yaml").read_text() == "kind: ConfigMap\n"


def test_the_command_prints_the_manifest_and_exits_2_on_errors():
    ok = subprocess.run([sys.executable, "-m", "serving.manifests", "networkpolicy"], cwd=ROOT,
                        env=job_env(), capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and yaml.safe_load(ok.stdout)["kind"] == "NetworkPolicy"
    bad = subprocess.run([sys.executable, "-m", "serving.manifests", "rayservice", "models=[nope]"],
                         cwd=ROOT, env=job_env(), capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "error: `models` names 'nope'" in bad.stderr
