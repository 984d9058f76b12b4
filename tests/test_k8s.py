"""deploy/k8s/ checked offline: every manifest against the Kubernetes API's own JSON schemas (strict: an unknown
or misspelt field fails), shipped by the kubernetes-validate package, and the parts checked against each other
and the code: selectors match their pods, the gateway is ready on /ready, the policy passes `policy check` and
lists every engine replica by its stable name, Redis keeps an append-only file on a volume, and Prometheus keeps
the gateway and engine pods under the job names the dashboard and alerts use."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_compose import flag

kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S = Path(__file__).resolve().parents[1] / "deploy" / "k8s"
VERSIONS = ["1.30.0", "1.37.0"]  # the oldest Kubernetes still commonly run, and the newest schemas shipped


def documents() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    return docs


@pytest.fixture(scope="module")
def objects() -> dict[tuple[str, str], dict[str, Any]]:
    return {(d["kind"], d["metadata"]["name"]): d for d in documents()}


def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


def container(obj: dict[str, Any]) -> dict[str, Any]:
    (only,) = pod_spec(obj)["containers"]
    return only


@pytest.mark.parametrize("version", VERSIONS)
def test_every_manifest_is_valid_against_the_kubernetes_schemas(version: str) -> None:
    docs = documents()
    assert len(docs) >= 10
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {e.message} at {list(e.path)}")


def test_schemas_catch_a_misspelt_field() -> None:
    bad = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"},
           "spec": {"selectr": {"a": "b"}, "ports": [{"port": 80}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_one_namespace_and_selectors_match_their_pods(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    assert ("Namespace", "llm-gateway") in objects
    assert {d["metadata"].get("namespace") for k, d in objects.items() if k[0] != "Namespace"} == {"llm-gateway"}
    workloads = {k: d for k, d in objects.items() if k[0] in ("Deployment", "StatefulSet")}
    assert {name for _, name in workloads} == {"gateway", "engine", "redis", "prometheus"}
    for (kind, name), obj in workloads.items():
        labels = obj["spec"]["template"]["metadata"]["labels"]
        assert obj["spec"]["selector"]["matchLabels"].items() <= labels.items(), name
        service = objects[("Service", name)]
        assert service["spec"]["selector"].items() <= labels.items(), name
        ports = {p["name"] for p in container(obj)["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports, name
        if kind == "StatefulSet":
            assert obj["spec"]["serviceName"] == name


def test_gateway_deployment_is_ready_on_ready(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    from gateway.cli import build_parser

    gateway = container(objects[("Deployment", "gateway")])
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "http"}
    assert gateway["livenessProbe"]["httpGet"]["path"] == "/health"
    args = build_parser().parse_args(gateway["command"][1:])  # SystemExit if the CLI does not take it
    assert gateway["command"][:2] == ["llm-gateway", "serve"] and args.host == "0.0.0.0"
    assert {p["containerPort"] for p in gateway["ports"]} == {args.port}
    assert objects[("Deployment", "gateway")]["spec"]["replicas"] >= 2


def test_policy_passes_check_and_lists_every_engine_replica(objects: dict[tuple[str, str], dict[str, Any]],
                                                             tmp_path: Path) -> None:
    from engine.serving.cli import build_parser
    from gateway.config.loader import parse_policy

    gateway = objects[("Deployment", "gateway")]
    mount = next(m for m in container(gateway)["volumeMounts"] if m["name"] == "policy")
    volume = next(v for v in pod_spec(gateway)["volumes"] if v["name"] == "policy")
    policy_text = objects[("ConfigMap", volume["configMap"]["name"])]["data"]["policy.yaml"]
    assert flag(container(gateway)["command"], "--policy") == f"{mount['mountPath']}/policy.yaml"
    env = {e["name"]: e["value"] for e in container(gateway)["env"]}
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy_text)
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "check", str(policy_file)],
                            capture_output=True, text=True, timeout=120, env={"PATH": "", **env})
    assert result.returncode == 0, result.stdout + result.stderr

    engine = objects[("StatefulSet", "engine")]
    args = build_parser().parse_args(container(engine)["command"][2:])
    replicas = engine["spec"]["replicas"]
    expected = [f"http://engine-{i}.engine:{args.port}" for i in range(replicas)]
    assert parse_policy(policy_text, "policy.yaml", env=env).backends["pool"].urls == expected
    assert objects[("Service", "engine")]["spec"]["clusterIP"] == "None"  # per-pod DNS names
    assert env["REDIS_URL"] == "redis://redis:6379/0"


def test_redis_keeps_an_append_only_file_on_a_volume(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    redis = objects[("StatefulSet", "redis")]
    command = container(redis)["command"]
    assert flag(command, "--appendonly") == "yes"
    data_dir = flag(command, "--dir")
    mounts = {m["mountPath"]: m["name"] for m in container(redis)["volumeMounts"]}
    assert mounts[data_dir] in {t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]}


def test_prometheus_keeps_gateway_and_engine_pods(objects: dict[tuple[str, str], dict[str, Any]]) -> None:
    config = yaml.safe_load(objects[("ConfigMap", "prometheus-config")]["data"]["prometheus.yml"])
    compose_jobs = {j["job_name"] for j in yaml.safe_load((K8S.parents[1] / "prometheus.yml").read_text())[
        "scrape_configs"]}
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == compose_jobs == {"gateway", "engine"}  # the dashboard and alerts select on these
    for name, job in jobs.items():
        keep = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
        pod_labels = objects[(("Deployment" if name == "gateway" else "StatefulSet"), name)]["spec"]["template"][
            "metadata"]["labels"]
        assert pod_labels["app.kubernetes.io/name"] == keep["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
        assert job["metrics_path"] == "/metrics"
    prometheus = objects[("Deployment", "prometheus")]
    assert pod_spec(prometheus)["serviceAccountName"] == "prometheus"
    role = objects[("Role", "prometheus")]
    assert {"list", "watch"} <= set(role["rules"][0]["verbs"]) and "pods" in role["rules"][0]["resources"]
    rules_mount = next(m for m in container(prometheus)["volumeMounts"] if m["name"] == "rules")
    assert config["rule_files"] == [f"{rules_mount['mountPath']}/*.yml"]
