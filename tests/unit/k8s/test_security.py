"""Secure by default: Ray token auth everywhere, ports inside the cluster, keys only from Secrets.

- every Ray cluster (RayCluster, the RayService's and each RayJob's) turns on Ray's token
  authentication with the token from a Kubernetes Secret (KubeRay `authOptions`);
- the head Services are ClusterIP and a NetworkPolicy admits only pods of the namespace (plus the
  KubeRay operator on the dashboard and Serve ports);
- no credential is written in a manifest: secret-looking variables come from `secretKeyRef`, and
  `runtimeEnvYAML` (logged, shown on the dashboard) holds no key.
"""

from __future__ import annotations

import re

import pytest
import yaml

from serving.manifests import AUTH_SECRET, OPERATOR_NAMESPACE
from tests.unit.k8s.helpers import (
    K8S, SECRET_NAME, SECRET_VALUE, all_containers, by_kind, cluster_specs, groups, manifest,
    manifest_files,
)



@pytest.mark.parametrize("where", sorted(cluster_specs()))
def test_token_auth_on_with_the_token_from_a_secret(where: str) -> None:
    auth = cluster_specs()[where].get("authOptions")
    assert auth == {"mode": "token", "secretName": AUTH_SECRET}, (
        f"{where}: Ray token authentication must be on, its token from the Secret {AUTH_SECRET}")
    # Token auth needs Ray 2.52 or later on every node.
    major, minor = (int(x) for x in cluster_specs()[where]["rayVersion"].split(".")[:2])
    assert (major, minor) >= (2, 52)


@pytest.mark.parametrize("where", sorted(cluster_specs()))
def test_head_service_stays_inside_the_cluster(where: str) -> None:
    head = cluster_specs()[where]["headGroupSpec"]
    assert head.get("serviceType") == "ClusterIP", f"{where}: no LoadBalancer/NodePort head Service"
    assert "headService" not in head, f"{where}: a custom head Service could expose the ports"
    for _, group in groups(cluster_specs()[where]):
        for c in group["template"]["spec"]["containers"]:
            assert not any("hostPort" in p for p in c.get("ports", [])), f"{where}: hostPort"
        assert not group["template"]["spec"].get("hostNetwork"), f"{where}: hostNetwork"


@pytest.mark.parametrize("name", by_kind("RayService"))
def test_serve_service_is_not_exposed(name: str) -> None:
    serve_svc = manifest(name)["spec"].get("serveService", {})
    assert serve_svc.get("spec", {}).get("type", "ClusterIP") == "ClusterIP"


def test_network_policy_admits_only_the_namespace_and_the_operator() -> None:
    (name,) = by_kind("NetworkPolicy")
    doc = manifest(name)
    assert doc["apiVersion"] == "networking.k8s.io/v1"
    spec = doc["spec"]
    # Every Ray pod KubeRay creates carries this label (head, workers, of any RayCluster).
    assert spec["podSelector"] == {"matchLabels": {"ray.io/is-ray-node": "yes"}}
    assert "Ingress" in spec["policyTypes"]
    assert set(spec) <= {"podSelector", "policyTypes", "ingress", "egress"}
    for rule in spec["ingress"]:
        assert set(rule) <= {"from", "ports"} and rule.get("from"), "a rule without `from` admits everyone"
        for peer in rule["from"]:
            assert "ipBlock" not in peer, "no address ranges: pods of this cluster only"
            if "namespaceSelector" in peer:
                # Another namespace only for the operator, and only on the dashboard/Serve ports.
                assert peer["namespaceSelector"] == {
                    "matchLabels": {"kubernetes.io/metadata.name": OPERATOR_NAMESPACE}}
                assert {p["port"] for p in rule["ports"]} <= {8265, 8000}
            else:
                assert peer == {"podSelector": {}}, "same-namespace pods only"


@pytest.mark.parametrize("name", manifest_files())
def test_no_literal_secrets(name: str) -> None:
    text = (K8S / name).read_text()
    assert not SECRET_VALUE.search(text), f"k8s/{name} contains what looks like a credential"
    doc = manifest(name)
    assert doc["kind"] != "Secret"
    for where, container in all_containers(doc):
        env = {e["name"]: e for e in container.get("env", [])}
        for var in env.values():
            if SECRET_NAME.search(var["name"]):
                assert "value" not in var and "secretKeyRef" in var.get("valueFrom", {}), (
                    f"{where}: {var['name']} must come from a Secret (valueFrom.secretKeyRef)")
        for src in container.get("envFrom", []):
            assert set(src) == {"secretRef"}, f"{where}: keys come from Secrets, not ConfigMaps"
        if container["name"].startswith("ray-"):
            ref = env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]
            assert ref["name"] and ref["key"], f"{where}: HF_TOKEN from a Secret"


@pytest.mark.parametrize("name", by_kind("RayJob"))
def test_runtime_env_holds_no_key(name: str) -> None:
    """runtime_env is logged and shown on the dashboard: keys reach the job through Secrets."""
    runtime_env = yaml.safe_load(manifest(name)["spec"]["runtimeEnvYAML"]) or {}
    for var in runtime_env.get("env_vars", {}):
        assert not SECRET_NAME.search(var), f"k8s/{name}: {var} in runtimeEnvYAML is plain text"
    assert not re.search(r"https?://[^/\s]+:[^@/\s]+@", runtime_env.get("working_dir", "")), (
        "credentials in the working_dir URI end up in Ray's logs and directory names")
    # The external judges' keys come from the optional llm-api-keys Secret.
    containers = [c for _, c in all_containers(manifest(name))]
    assert all(c.get("envFrom") for c in containers if c["name"].startswith("ray-"))
