"""deploy/compose.yaml and docs/scaling.md agree, and the compose file would run: no container runtime is available
to CI, so it is checked, not started (tests/ops/test_scaling_by_hand.py starts the same topology without
containers). It parses; it has the services the page describes; every CITERAG_* variable it, the page or the
image sets is a real setting, and its values pass the settings' validation; the files it mounts and builds
from exist; the load balancer's upstreams are its API services; the benchmark's placeholders are in place."""

from __future__ import annotations

import ipaddress
import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from citerag.settings import ENV_PREFIX, Settings, load_settings
from corpus_paths import ROOT
from deploy_files import DEPLOY

COMPOSE = DEPLOY / "compose.yaml"
DOCKERFILE = DEPLOY / "Dockerfile"
CADDYFILE = DEPLOY / "Caddyfile"
ENV_EXAMPLE = DEPLOY / "env.example"
SCALING = ROOT / "docs" / "scaling.md"

SERVICES = {"postgres", "postgres-replica", "redis", "api-1", "api-2", "worker", "lb"}
CITERAG_SERVICES = ("api-1", "api-2", "worker")
VARIABLES = {"CITERAG_STORE_URL", "CITERAG_STORE_READ_URL", "CITERAG_QUEUE", "CITERAG_CACHE_URL"}
# Where the benchmark writes its numbers (`<!-- measured: KEY -->`); docs/scaling.md explains the convention.
# benchmarks/bench_backends.py fails a run whose figure finds no marker; this keeps every marker one it writes.
MEASURED = {"run.machine_and_date", "ingest.embedded", "ingest.workers_1", "ingest.workers_2",
            "query.embedded.p50_ms", "query.embedded.p95_ms", "query.postgresql.p50_ms", "query.postgresql.p95_ms",
            "query.embedded_hnsw.p50_ms", "query.postgresql_hnsw.p50_ms", "hnsw.recall_at_10",
            "hnsw.embedded_recall_at_10", "answers.same_citations"}
_INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::?[?-][^}]*)?\}")


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return data


def real_variables() -> set[str]:
    """Every CITERAG_* name a citerag process reads: one per setting, plus the home folder and the config file
    (citerag.settings.load_settings and index_dir_from)."""
    return {ENV_PREFIX + name.upper() for name in Settings.model_fields if name != "index_dir"} \
        | {"CITERAG_HOME", "CITERAG_CONFIG"}


def citerag_names(text: str) -> set[str]:
    return set(re.findall(r"\bCITERAG_[A-Z0-9_]+\b", text))


def interpolated(value: str, values: dict[str, str]) -> str:
    """Compose's ${NAME}, ${NAME:?message} and ${NAME:-default}, with `values` for the names."""
    return _INTERPOLATION.sub(lambda m: values[m.group(1)], value)


def test_the_compose_file_has_the_services_the_page_describes() -> None:
    services = compose()["services"]
    assert set(services) == SERVICES
    assert services["postgres"]["image"] == services["postgres-replica"]["image"] == "pgvector/pgvector:pg17"
    # A hot standby refuses to start with smaller sizing than its primary's: both get the same flags.
    assert services["postgres"]["command"] == services["postgres-replica"]["command"]
    assert "max_connections=300" in services["postgres"]["command"]
    # The API processes trust proxy headers from the balancer's fixed address only, inside the file's own subnet.
    lb_address = services["lb"]["networks"]["default"]["ipv4_address"]
    subnet = compose()["networks"]["default"]["ipam"]["config"][0]["subnet"]
    assert ipaddress.ip_address(lb_address) in ipaddress.ip_network(subnet)
    for name in ("api-1", "api-2"):
        # Both API processes count requests per key against one budget, in the Redis they share.
        assert services[name]["command"] == ["citerag", "serve", "--host", "0.0.0.0", "--port", "8000",
                                             "--rate-limit-storage", "redis://redis:6379/1",
                                             "--forwarded-allow-ips", lb_address]
    assert services["worker"]["command"][:2] == ["citerag", "worker"]
    assert services["worker"]["deploy"]["replicas"] >= 2
    for name in CITERAG_SERVICES:
        assert services[name]["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert set(services[name]["depends_on"]) == {"postgres", "postgres-replica", "redis"}
    assert services["lb"]["ports"] == ["8000:8000"]  # the only published port: the database stays inside
    assert not any("ports" in services[name] for name in SERVICES - {"lb"})


def test_every_citerag_variable_is_a_real_setting_and_its_value_validates(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    services = compose()["services"]
    real = real_variables()
    for name in CITERAG_SERVICES:
        assert set(services[name]["environment"]) == VARIABLES, name
    texts = {"compose.yaml": COMPOSE.read_text(encoding="utf-8"), "Dockerfile": DOCKERFILE.read_text(encoding="utf-8"),
             "docs/scaling.md": SCALING.read_text(encoding="utf-8")}
    for where, text in texts.items():
        assert citerag_names(text) <= real, f"{where}: not settings: {sorted(citerag_names(text) - real)}"

    for name in list(os.environ):
        if name.startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    for name, value in services["api-1"]["environment"].items():
        monkeypatch.setenv(name, interpolated(value, {"PG_PASSWORD": "s3cret", "REPLICATION_PASSWORD": "r3pl"}))
    settings = load_settings(tmp_path)  # what `citerag serve` in the container loads
    assert settings.store_scheme == "postgresql" and settings.queue == "procrastinate"
    assert settings.store_url == "postgresql://citerag:s3cret@postgres:5432/citerag"
    assert settings.store_read_url == "postgresql://citerag:s3cret@postgres-replica:5432/citerag"
    assert settings.cache_url == "redis://redis:6379/0"
    # The URLs name the compose services: the hosts resolve inside its network.
    for url in (settings.store_url, settings.store_read_url, settings.cache_url):
        assert url.split("@")[-1].split("//")[-1].split(":")[0] in SERVICES


def test_the_passwords_come_from_the_env_file_and_nothing_else_is_needed() -> None:
    text = COMPOSE.read_text(encoding="utf-8")
    needed = {m.group(1) for m in _INTERPOLATION.finditer(text)}
    assert needed == {"PG_PASSWORD", "REPLICATION_PASSWORD"}
    assert all(re.search(rf"\$\{{{name}:\?", text) for name in needed)  # missing = an error, never empty
    example = dict(line.split("=", 1) for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines()
                   if line and not line.startswith("#"))
    assert set(example) == needed and all(v == "" for v in example.values())  # no password committed


def test_what_the_compose_file_mounts_and_builds_exists() -> None:
    services = compose()["services"]
    mounted = [volume.split(":")[0] for service in services.values() for volume in service.get("volumes", [])
               if volume.startswith("./")]
    assert sorted(mounted) == ["./Caddyfile", "./postgres/init-primary.sh", "./postgres/replica.sh"]
    for path in mounted:
        assert (DEPLOY / path).is_file(), path
        if path.endswith(".sh"):
            assert os.access(DEPLOY / path, os.X_OK), path
            result = subprocess.run(["bash", "-n", str(DEPLOY / path)], capture_output=True, text=True)
            assert result.returncode == 0, result.stderr
    assert (ROOT / services["api-1"]["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert set(compose()["volumes"]) == {"pg-primary", "pg-replica"}


def test_the_load_balancer_spreads_over_the_api_services() -> None:
    upstreams = re.search(r"reverse_proxy\s+([^{\n]+)\{", CADDYFILE.read_text(encoding="utf-8"))
    assert upstreams is not None
    assert upstreams.group(1).split() == ["api-1:8000", "api-2:8000"]
    assert "health_uri /healthz" in CADDYFILE.read_text(encoding="utf-8")


def test_the_image_installs_the_postgres_extra_at_the_projects_torch_pin() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    torch = next(d for d in project["dependencies"] if d.startswith("torch=="))
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert f"--index-url https://download.pytorch.org/whl/cpu {torch}" in text
    assert "pip install '.[postgres]'" in text and "postgres" in project["optional-dependencies"]
    assert "FROM python:3.11" in text and project["requires-python"].startswith(">=3.11")
    ignore = (DEPLOY / "Dockerfile.dockerignore").read_text(encoding="utf-8").splitlines()
    assert "*" in ignore and "!src" in ignore  # the context sends src and the project files, never .venv


def test_the_page_names_every_service_and_variable_and_keeps_the_benchmarks_placeholders() -> None:
    text = SCALING.read_text(encoding="utf-8")
    for service in SERVICES:
        assert f"`{service}`" in text, service
    for variable in VARIABLES:
        assert f"`{variable}`" in text, variable
    assert "pgvector/pgvector:pg17" in text
    assert set(re.findall(r"<!-- measured: ([a-z0-9_.]+) -->", text)) == MEASURED
    for link in re.findall(r"\]\((\.\./[^)#]+)\)", text):
        assert (SCALING.parent / link).resolve().exists(), link
