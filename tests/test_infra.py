"""What can be checked of infra/ and flows/ without a Docker engine: the files parse, the guide
names real services, images are pinned, the worker gets exactly the environment the code reads,
secrets are interpolated (never written), and flows/prefect.yaml deploys importable flows with one
run per index."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
INFRA = REPO / "infra"
COMPOSE = INFRA / "docker-compose.yml"
CLUSTER = INFRA / "docker-compose.cluster.yml"
GUIDE = INFRA / "README.md"
PREFECT_YAML = REPO / "flows" / "prefect.yaml"

# Read by the code, but only as test or demo hooks: never set on a production worker.
TEST_HOOKS = {"REINDEX_EMBED_LOG", "REINDEX_CRASH_AT", "REINDEX_PAUSE_AT", "REINDEX_CRASH_ONCE", "REINDEX_DEMO_DIR"}
# Read by the code, optional on the worker: the flows take a `task_runner` parameter instead.
OPTIONAL = {"REINDEX_TASK_RUNNER", "REINDEX_INDEX_LEASE_S", "PREFECT_PROFILE", "PREFECT_HOME", "PREFECT_PROFILES_PATH",
            "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS",  # only named in a message
            "REINDEX_CACHE_DIR", "XDG_CACHE_HOME",  # where ONNX exports are cached (a default that works)
            "REINDEX_POOL_START_TIMEOUT_S",  # prefect-pool applies: a default that works
            "REINDEX_CARRY_CHUNKS"}  # plans carry their chunks to the shards unless switched off: a default that works
# What the worker needs that third-party libraries read (boto3, Prefect).
THIRD_PARTY_REQUIRED = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "PREFECT_API_URL"}
SECRETS = {"QDRANT_API_KEY", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID", "POSTGRES_PASSWORD",
           "QDRANT__SERVICE__API_KEY", "MINIO_ROOT_PASSWORD", "MINIO_ROOT_USER"}


def _load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict), f"{path} is not a mapping"
    return data


def _services() -> dict[str, dict]:
    out: dict[str, dict] = {}
    for path in (COMPOSE, CLUSTER):
        for name, svc in _load(path)["services"].items():
            out.setdefault(name, {}).update(svc)
    return out


def _code_env_reads() -> set[str]:
    names: set[str] = set()
    for py in (REPO / "src" / "reindex").rglob("*.py"):
        text = py.read_text(encoding="utf-8")
        names |= set(re.findall(r"os\.environ\.get\(\s*[\"']([A-Z0-9_]+)[\"']", text))
        names |= set(re.findall(r"os\.getenv\(\s*[\"']([A-Z0-9_]+)[\"']", text))
        names |= set(re.findall(r"os\.environ\[\s*[\"']([A-Z0-9_]+)[\"']\s*\]", text))
        # Config fields naming an environment variable (store.api_key_env) and their defaults.
        names |= set(re.findall(r"_env: str = Field\(\s*[\"']([A-Z0-9_]+)[\"']", text))
    return names


def test_compose_files_parse_and_the_cluster_has_three_bootstrapped_nodes() -> None:
    main, cluster = _load(COMPOSE), _load(CLUSTER)
    assert {"qdrant", "postgres", "prefect-server", "minio", "worker", "dask-scheduler", "dask-worker"} <= set(main["services"])
    assert "tcp://dask-scheduler:8786" in main["services"]["dask-worker"]["command"]
    nodes = {n: s for n, s in cluster["services"].items() if n.startswith("qdrant-")}
    assert len(nodes) == 3
    for name, svc in nodes.items():
        assert svc["environment"]["QDRANT__CLUSTER__ENABLED"] == "true"
        cmd = " ".join(svc["command"])
        assert f"--uri http://{name}:6335" in cmd
        if name != "qdrant-0":
            assert "--bootstrap http://qdrant-0:6335" in cmd
    for v in ("qdrant-storage", "postgres-data", "minio-data"):
        assert v in main["volumes"]
    assert any("/qdrant/storage" in m for m in main["services"]["qdrant"]["volumes"])


def test_every_service_the_guide_names_exists() -> None:
    guide = GUIDE.read_text(encoding="utf-8")
    table = guide.split("## Services", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"^\| `([a-z0-9-]+)` \|", table, flags=re.M))
    named |= set(re.findall(r"`(qdrant-\d)`", table))
    assert named >= {"qdrant", "postgres", "prefect-server", "minio", "worker", "qdrant-0", "qdrant-1", "qdrant-2",
                     "dask-scheduler", "dask-worker"}
    missing = named - set(_services())
    assert not missing, f"the guide names services no compose file defines: {sorted(missing)}"
    for cmd in re.findall(r"docker compose [^\n]*exec(?: -w \S+)? ([a-z0-9-]+)", guide):
        assert cmd in _services(), f"the guide runs a command in unknown service {cmd!r}"


def test_every_image_is_pinned_to_a_version() -> None:
    images = {n: s["image"] for n, s in _services().items() if "image" in s}
    assert len(images) >= 7
    for name, image in images.items():
        assert ":" in image, f"{name}: {image} has no tag"
        tag = image.rsplit(":", 1)[1]
        assert tag != "latest" and re.search(r"\d", tag), f"{name}: {image} is not pinned to a version"
    dockerfile = (INFRA / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^FROM (\S+)", dockerfile, flags=re.M)[1]
    assert re.search(r":\d+\.\d+\.\d+", base), base
    assert "torch==2.13.0" in dockerfile and "whl/cpu" in dockerfile


def test_the_worker_gets_exactly_the_environment_the_code_reads() -> None:
    worker = _load(COMPOSE)["services"]["worker"]
    env = worker["environment"]
    reads = _code_env_reads()
    assert "QDRANT_API_KEY" in reads and "REINDEX_SHARD_WORKERS" in reads, reads
    needed = (reads - TEST_HOOKS - OPTIONAL) | THIRD_PARTY_REQUIRED
    missing = needed - set(env)
    assert not missing, f"the code reads {sorted(missing)} but the worker does not get them"
    for name in TEST_HOOKS:
        assert name not in env, f"{name} is a test hook and must not be set on a worker"
    unknown = {n for n in env if n not in reads and not n.startswith(("AWS_", "PREFECT_", "HF_", "TRANSFORMERS_",
                                                                       "TOKENIZERS_"))}
    assert unknown <= {"DO_NOT_TRACK", "REINDEX_WORKDIR"}, f"worker variables nothing reads: {sorted(unknown)}"
    guide = GUIDE.read_text(encoding="utf-8")
    for name in needed | OPTIONAL:
        assert f"`{name}`" in guide, f"the guide does not explain {name}"


def test_secrets_are_interpolated_from_the_environment_never_written() -> None:
    for path in (COMPOSE, CLUSTER):
        for name, svc in _load(path)["services"].items():
            for key, value in (svc.get("environment") or {}).items():
                if key in SECRETS:
                    assert re.fullmatch(r"\$\{[A-Z0-9_]+(:\?[^}]*|:-)?\}", str(value)), (
                        f"{path.name}: {name}.{key} must come from the environment, not be written ({value!r})")
            if "PREFECT_API_DATABASE_CONNECTION_URL" in (svc.get("environment") or {}):
                assert "${POSTGRES_PASSWORD" in svc["environment"]["PREFECT_API_DATABASE_CONNECTION_URL"]


def test_the_guide_says_where_shards_and_replicas_come_from() -> None:
    text = CLUSTER.read_text(encoding="utf-8") + GUIDE.read_text(encoding="utf-8")
    assert "store.shard_number" in text and "store.replication_factor" in text
    guide = GUIDE.read_text(encoding="utf-8")
    for needle in ("store.url", "state.uri", "state.endpoint_url" if "state.endpoint_url" in guide else "endpoint_url",
                   "PREFECT_API_URL", "Resume", "--scale worker="):
        assert needle in guide, needle


def test_prefect_yaml_parses_and_deploys_importable_flows_one_run_per_index(monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.cli.deploy._models import PrefectYamlModel
    from prefect.flows import load_flow_from_entrypoint

    raw = _load(PREFECT_YAML)
    model = PrefectYamlModel.model_validate(raw)
    assert len(model.deployments) == 3
    monkeypatch.chdir(REPO)
    pool = " ".join(_load(COMPOSE)["services"]["worker"]["command"]).split("--pool ")[1].split()[0]
    crons = {}
    for dep in model.deployments:
        fl = load_flow_from_entrypoint(dep.entrypoint)
        crons[fl.name] = dep.schedules[0].cron
        if fl.name == "reindex-gc":  # gc never pauses: a deployment slot is safe there
            assert dep.concurrency_limit.limit == 1 and dep.concurrency_limit.collision_strategy == "ENQUEUE"
        else:  # a paused run's deployment slot is released and its lease renewal then crashes the run (issue 13);
            # runs of one index are serialised by the index's global limit instead
            assert dep.concurrency_limit is None
        assert dep.schedules and all(s.timezone for s in dep.schedules)
        assert dep.work_pool.name == pool
        assert {"config", "index"} <= set(dep.parameters)
        assert set(dep.parameters) <= set(fl.parameters.properties), f"{fl.name}: unknown parameters"
    assert set(crons) == {"reindex-sync", "reindex-reindex", "reindex-gc"}
    assert crons["reindex-sync"] == "0 * * * *"


def test_deployments_built_by_reindex_deploy_match_the_yaml(tmp_path: Path) -> None:
    from reindex.orchestration import deployment_specs

    specs = deployment_specs(str(tmp_path / "reindex.yaml"), "docs", str(tmp_path / "plans"), timezone="Europe/Berlin")
    assert [d.entrypoint for d in specs] == ["reindex.orchestration.sync_flow", "reindex.orchestration.reindex_flow",
                                             "reindex.orchestration.gc_flow"]
    for d in specs:
        assert d.name == "docs"
        if d.entrypoint.endswith("gc_flow"):
            assert d.concurrency_limit == 1 and d.concurrency_options.collision_strategy == "ENQUEUE"
        else:
            assert d.concurrency_limit is None
        assert d.schedules[0].schedule.timezone == "Europe/Berlin"
        assert d.parameters["index"] == "docs"


def test_ci_installs_chromium_from_debian_before_the_tests_so_the_browser_tests_run() -> None:
    script = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    install = script.index("apt-get install -y -qq chromium")
    assert script.index("apt-get update") < install < script.index("\nmake test")
    browser_tests = [t for t in (REPO / "tests").glob("test_*.py") if "/usr/bin/chromium" in t.read_text()]
    assert browser_tests  # what the install is for: they skip without /usr/bin/chromium
