"""The cluster-launcher YAML (cluster/launcher/a100.yaml): Ray's schema, A100 nodes, token auth.

Ray is a hard dependency of this project, so Ray's launcher schema failing to load is a failure
here, never a skip.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import ray
import yaml

from tests.unit.k8s.helpers import A100_ACCELERATOR, LAUNCHER, SECRET_VALUE


def launcher() -> dict:
    return yaml.safe_load(LAUNCHER.read_text())


def test_launcher_yaml() -> None:
    cfg = launcher()
    node_types = cfg["available_node_types"]
    assert cfg["head_node_type"] in node_types
    assert cfg["provider"]["type"] == "aws"
    assert cfg["idle_timeout_minutes"] > 0
    gpu = [t for t in node_types.values() if t["node_config"]["InstanceType"] == "p4de.24xlarge"]
    assert gpu, "an 8x A100-80G node type (p4de.24xlarge)"
    for t in gpu:
        assert t["resources"].get(f"accelerator_type:{A100_ACCELERATOR}") == 1
        assert t["max_workers"] >= 1
    head = cfg["head_node_type"]
    assert node_types[head]["resources"].get("CPU") == 0
    assert cfg["max_workers"] >= sum(t.get("max_workers", 0) for k, t in node_types.items() if k != head)
    # The project goes in over the image without touching its vLLM/torch (tests/unit/test_pins.py).
    assert any("bash cluster/launcher/install_on_image.sh" in c for c in cfg["setup_commands"])
    assert "." in cfg["file_mounts"].values(), "the repository goes to the nodes"


def test_launcher_yaml_matches_ray_schema() -> None:
    schema_file = Path(ray.__file__).parent / "autoscaler" / "ray-schema.json"
    assert schema_file.is_file(), f"Ray's cluster-launcher schema is missing: {schema_file}"
    schema = json.loads(schema_file.read_text())
    errors = sorted(f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
                    for e in jsonschema.Draft7Validator(schema).iter_errors(launcher()))
    assert not errors, "\n".join(errors)


def test_launcher_turns_on_token_auth_with_the_token_from_ssm() -> None:
    cfg = launcher()
    assert "--env RAY_AUTH_MODE=token" in cfg["docker"]["run_options"], "every container in token mode"
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        starts = [c for c in cfg[key] if "ray start" in c]
        assert starts and all("RAY_AUTH_MODE=token" in c for c in starts), key
    token_setup = [c for c in cfg["setup_commands"] if "ray-auth-token" in c]
    assert len(token_setup) == 1, "the Ray token is fetched from the secret store"
    # Into Ray's default token path, readable by its owner only, and no fallback: a node without
    # the token must not come up half-configured.
    assert "~/.ray/auth_token" in token_setup[0] and "0o600" in token_setup[0]
    assert "||" not in token_setup[0]


def test_launcher_has_no_literal_secrets() -> None:
    text = LAUNCHER.read_text()
    assert not SECRET_VALUE.search(text)
    assert not re.search(r"RAY_AUTH_TOKEN=[^\s\"$]", text), "the token is never written here"


def test_launcher_docs_cover_the_whole_round_trip() -> None:
    readme = (LAUNCHER.parent / "README.md").read_text()
    for step in ("ray up cluster/launcher/a100.yaml", "ray job submit", "--working-dir .",
                 "python -m jobs.pipeline experiment=", "ray job logs", "--follow",
                 "ray rsync-down", "pd.read_parquet", "ray down", "RAY_AUTH_MODE=token"):
        assert step in readme, f"cluster/launcher/README.md does not show `{step}`"
