"""Bad inputs of issue 33, each answered with one line naming the field or file and the fix (never an
internal error, a hang, or a misleading message): non-finite numbers in the config, a plan nested too deep,
an approval whose fields are not text, odd task-runner specs, a FIFO as the source, a file as the store
folder, a truncated chunk-manifest file, sync beside an apply, the README's command table, and a first
build's cutover that now runs its queries."""

from __future__ import annotations

import json
import os
import re
import subprocess
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from helpers_index import REINDEX_BIN, Workspace, subprocess_env
from pydantic import BaseModel

from reindex.cli import main
from reindex.domain.config import PipelineConfig, config_from_dict
from reindex.errors import ConfigError


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(autouse=True)
def _no_prefect(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))


# Non-finite numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("field", "value", "shown"), [
    ("retention_days", ".inf", ".inf"), ("min_recall_delta", ".nan", ".nan"), ("min_recall_delta", "-.inf", "-.inf"),
])
def test_validate_and_plan_refuse_a_non_finite_cutover_number(tmp_path: Path, field: str, value: str,
                                                             shown: str) -> None:
    """`.inf` and `.nan` passed validate and crashed plan with "Out of range float values are not JSON
    compliant"; now both commands say which field, before any work."""
    ws = Workspace(tmp_path / "ws", extra=f"cutover: {{{field}: {value}}}\n")
    for command in ("validate", "plan"):
        r = _cli(command, "-c", str(ws.config))
        assert (r.exit_code, r.stderr) == (1, f"error: {ws.config}: cutover.{field}: got {shown}; expected a finite "
                                              "number\n"), command


def _float_fields(model: type[BaseModel], path: tuple[str, ...] = ()) -> typing.Iterator[tuple[tuple[str, ...], dict]]:
    """(path, the enclosing models' fixed ``kind`` values) of every float field reachable from ``model``."""
    for name, f in model.model_fields.items():
        args = typing.get_args(f.annotation) or (f.annotation,)
        if float in args:
            yield path + (name,), {}
        for arg in args:
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                kind = arg.model_fields.get("kind")
                for sub, kinds in _float_fields(arg, path + (name,)):
                    yield sub, ({path + (name,): kind.default} if kind is not None else {}) | kinds


def test_every_float_field_of_every_section_refuses_inf_and_nan() -> None:
    """The refusal is central (the config models' base), so a float field added later is covered too."""
    found = list(_float_fields(PipelineConfig))
    assert len(found) >= 15 and (("cutover", "retention_days"), {}) in found
    for path, kinds in found:
        for value, shown in ((float("inf"), ".inf"), (float("nan"), ".nan")):
            data: dict[str, Any] = {"index": "docs", "source": "./corpus"}
            node = data
            for i, key in enumerate(path[:-1]):
                node = node.setdefault(key, {})
                if path[: i + 1] in kinds:
                    node["kind"] = kinds[path[: i + 1]]
            node[path[-1]] = value
            with pytest.raises(ConfigError) as err:
                config_from_dict(data, "reindex.yaml")
            assert f"{'.'.join(path)}: got {shown}; expected a finite number" in str(err.value), (path, str(err.value))


# Plans, approvals, task runners ---------------------------------------------------------------------------


@pytest.fixture
def planned(tmp_path: Path) -> tuple[Workspace, Path]:
    ws = Workspace(tmp_path / "ws")
    _plan, path = ws.plan()
    return ws, path


def test_a_plan_file_nested_200000_arrays_deep_is_one_line(planned: tuple[Workspace, Path]) -> None:
    ws, path = planned
    deep = path.with_name("deep.json")
    deep.write_text("[" * 200_000 + "]" * 200_000)
    for args in (["show", str(deep)], ["apply", str(deep), "-c", str(ws.config), "--no-progress"]):
        r = _cli(*args)
        assert (r.exit_code, r.stderr) == (1, f"error: {deep}: not a plan file (its JSON is nested too deeply to "
                                              "read)\n"), args


def test_an_approval_whose_plan_hash_is_a_number_is_one_line(planned: tuple[Workspace, Path]) -> None:
    from reindex.planner.approvals import approval_path

    ws, path = planned
    _cli("approve", str(path), "--by", "alice")
    record = approval_path(path)
    record.write_text(json.dumps({**json.loads(record.read_text()), "plan_hash": 123}))
    r = _cli("apply", str(path), "-c", str(ws.config), "--no-progress", "--no-prefect")
    assert (r.exit_code, r.stderr) == (1, f"error: {record}: not a valid approval record (plan_hash is 123, not "
                                          "text); delete it and record the approval again with `reindex approve "
                                          "PLAN --by NAME`\n")


@pytest.mark.parametrize(("spec", "line"), [
    ("threads:²", "task runner 'threads:²': '²' is not a positive whole number; expected threads, threads:N, "
                  "dask, dask-processes[:N], dask:tcp://HOST:PORT or prefect-pool:POOL[:N]"),
    ("dask-processes:257", "task runner 'dask-processes:257': at most 256 worker processes on one machine (each "
                           "loads the embedder); for more, start a Dask cluster and pass dask:tcp://HOST:PORT"),
])
def test_task_runner_specs_beyond_what_runs_are_one_line(planned: tuple[Workspace, Path], spec: str, line: str) -> None:
    ws, path = planned
    r = _cli("apply", str(path), "-c", str(ws.config), "--no-progress", "--no-prefect", "--task-runner", spec)
    assert (r.exit_code, r.stderr) == (1, f"error: {line}\n")


def test_256_local_processes_are_the_most_accepted() -> None:
    from reindex.runners import parse_task_runner

    assert parse_task_runner("dask-processes:256").workers == 256
    with pytest.raises(ConfigError, match="at most 256 worker processes"):
        parse_task_runner("dask-processes:257")


# FIFOs and other files that are not regular files --------------------------------------------------------------


def test_a_fifo_as_the_source_is_refused_without_opening_it(tmp_path: Path) -> None:
    """Opening a FIFO for reading waits for a writer: validate and plan hung. Run as real processes with a
    deadline, since a hang is what this test looks for."""
    ws = Workspace(tmp_path / "ws")
    os.mkfifo(ws.root / "feed.jsonl")
    ws.config.write_text(ws.config.read_text().replace("source: ./corpus", "source: ./feed.jsonl"))
    for command in ("validate", "plan"):
        r = subprocess.run([str(REINDEX_BIN), command, "-c", str(ws.config)], cwd=ws.root, env=subprocess_env(),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 1, (command, r.stderr)
        assert r.stderr.splitlines()[-1] == (
            f"error: source '{ws.root}/feed.jsonl' is a FIFO (named pipe), not a regular file; expected a directory, "
            "a .jsonl/.ndjson(.gz) or .parquet file, s3://bucket/prefix, or postgresql://host/db?table=NAME"), command


def test_a_fifo_inside_a_folder_source_is_a_bad_document_never_opened(tmp_path: Path) -> None:
    from reindex.adapters.sources import open_source
    from reindex.adapters.sources.base import ScanReport

    ws = Workspace(tmp_path / "ws")
    os.mkfifo(ws.corpus / "pipe.rst")
    os.mkfifo(ws.corpus / "pipe.bin")  # matches no include pattern: skipped like any such file
    report = ScanReport()
    docs = list(open_source(str(ws.corpus)).scan(report))
    assert len(docs) == 24 and "pipe.rst" not in {d.doc_id for d in docs}
    assert [(b.doc_id, b.reason) for b in report.bad] == [
        ("pipe.rst", "unreadable: a FIFO (named pipe), not a regular file")]


def test_store_path_naming_a_file_is_refused_by_validate_and_status(tmp_path: Path) -> None:
    """A file where the embedded store's folder should be validated, and `status` then called the live
    population `deleted`."""
    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    (ws.root / "vectors").write_text("not a folder")
    ws.config.write_text(ws.config.read_text() + "store: {path: ./vectors}\n")
    line = (f"error: store.path `{ws.root}/vectors` is a file, not a folder: point store.path at a folder (it is "
            "created if missing)\n")
    v = _cli("validate", "-c", str(ws.config))
    assert v.exit_code == 1 and v.stderr == line
    s = _cli("status", "-c", str(ws.config))
    assert (s.exit_code, s.stderr) == (1, line) and "deleted" not in s.output


# State that is corrupt is called corrupt --------------------------------------------------------------------------


def test_a_truncated_chunk_manifest_file_is_named_as_corrupt_not_as_a_changed_population(tmp_path: Path) -> None:
    from reindex.books.manifests import chunk_manifest_keys

    ws = Workspace(tmp_path / "ws")
    live = ws.build_live()
    ws.edit_documents()
    _plan, path = ws.plan()
    key = chunk_manifest_keys(ws.state(), "docs", live)[1]
    part = ws.root / ".reindex" / key
    part.write_bytes(part.read_bytes()[:100])  # truncated after planning
    r = _cli("apply", str(path), "-c", str(ws.config), "--no-progress", "--no-prefect")
    assert r.exit_code == 1
    assert re.fullmatch(
        rf"error: the chunk manifest file folder {re.escape(str(ws.root / '.reindex'))}/{re.escape(key)} of population "
        rf"{live} is corrupt \([^\n]+\); restore it from a backup, or delete it and run `reindex plan` again \(its "
        r"documents are then planned as added\)\n", r.stderr), r.stderr


# Locks, as people read them --------------------------------------------------------------------------------


def test_sync_beside_an_apply_says_skipped_once_and_names_the_lock_file(tmp_path: Path) -> None:
    from reindex.books.locks import acquire_lock

    ws = Workspace(tmp_path / "ws")
    ws.build_live()
    lock = acquire_lock(ws.state(), "docs", "otherhost:4242:abcd", purpose="apply 123 (document-scoped)")
    try:
        r = _cli("sync", "-c", str(ws.config), "--plans", str(ws.plans))
    finally:
        lock.release()
    assert r.exit_code == 0
    assert re.fullmatch(
        r"skipped: index 'docs' is locked by otherhost:4242:abcd \(apply 123 \(document-scoped\)\), expires in "
        r"(120|119|118) s unless renewed; wait for it to finish, or delete the file "
        rf"{re.escape(str(ws.lock_file))} if that process is gone\n", r.output), r.output


def test_the_readme_lists_each_command_once() -> None:
    """One row per command, except a command with modes told apart by a required option (`measure --pairs`,
    `measure --from-git`): `reindex runs` was listed twice with the same text."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `reindex ([a-z-]+)( [^`]*)?`", readme, flags=re.M)
    assert rows and {c for c, _ in rows} <= set(main.commands)
    forms = [(c, args.split()[0] if args.strip() and not args.strip().startswith("[") else "") for c, args in rows]
    assert len(forms) == len(set(forms)), sorted(f for f in forms if forms.count(f) > 1)


# A first build's cutover runs its queries ------------------------------------------------------------------


def test_a_first_builds_cutover_runs_the_queries_on_the_new_population(tmp_path: Path) -> None:
    """Before, `cutover --queries FILE` of an initial build ran none of them: the first population had no
    figure for later cutovers to be held against. Now they run on it alone; the gate keeps only the rules
    that apply to a first build (no comparison)."""
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    ws.apply(path)
    queries = ws.root / "queries.jsonl"
    queries.write_text("".join(json.dumps({"query": q, "doc_path": d}) + "\n" for q, d in (
        ("What is the style guide for Python code?", "pep-0008.rst"),
        ("docstring conventions", "pep-0257.rst"),
        ("a question with no labelled answer", None),
    )))
    r = _cli("cutover", str(path), "-c", str(ws.config), "--queries", str(queries))
    assert r.exit_code == 0, r.output
    report = json.loads(path.with_name(path.name.removesuffix(".json") + ".cutover.json").read_text())
    alone = report["first_build"]
    assert alone["collection"] == plan.body["identity"]["new"]["collection"] and len(alone["rows"]) == 3
    agg = alone["aggregate"]
    assert agg["queries"] == 3 and agg["recall_at_10_queries"] == 2 and 0.0 <= agg["recall_at_10"] <= 1.0
    # a first build: its own index is checked (nothing to compare its latency with)
    assert [x["rule"] for x in report["rules"]] == ["point-count", "no-failed-shards", "index-recall"]
    assert report["index_health"]["old"] is None and report["index_health"]["new"]["latency_ms_p95"] >= 0
    line = (f"  first build, nothing to compare with: 3 queries on {alone['collection']}: recall@10 "
            f"{agg['recall_at_10']:.3f} (2 labelled) · nDCG@10 {agg['ndcg_at_10']:.3f} (2 labelled) · MRR "
            f"{agg['mrr']:.3f} (2 labelled) · latency p50 {agg['latency_p50_ms']:.1f} ms")
    assert line in r.output.splitlines(), r.output
    md = path.with_name(path.name.removesuffix(".json") + ".cutover.md").read_text()
    assert f"| recall_at_10 | {agg['recall_at_10']:.3f} | 2 |" in md
