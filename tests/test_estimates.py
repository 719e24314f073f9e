"""Estimates that learn (issue 15): apply records the embedding throughput it measured and the next plan
prices with it, saying so in every report form; the precedence is config > apply > calibrate > default;
the what-if table's current row is the plan's own chunk count."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from helpers_index import Workspace

from reindex import api
from reindex.cli import main
from reindex.domain.identity import identity_of
from reindex.books.manifests import read_measured_rate
from reindex.reports import apply_text, plan_text
from reindex.usecases.apply import MIN_TOKENS_TO_MEASURE


def _measured(ws: Workspace) -> dict | None:
    return read_measured_rate(ws.state(), identity_of(ws.cfg()).vector_id)


def test_apply_records_its_rate_and_the_next_plan_uses_it_in_every_report(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    plan, path = ws.plan()
    assert plan.body["cost"]["rate_source"] == "default" and plan.body["cost"]["rate_measured"] is None
    r = ws.apply(path)
    actual = r.report["actual"]
    assert actual["tokens_embedded"] >= MIN_TOKENS_TO_MEASURE  # 38,302 tokens: enough to measure
    rec = _measured(ws)
    assert rec is not None and r.report["throughput"]["recorded"] == rec
    assert rec["tokens"] == actual["tokens_embedded"] and rec["seconds"] == r.report["throughput"]["embed_seconds"] > 0
    assert abs(rec["tokens_per_minute"] - rec["tokens"] / rec["seconds"] * 60) / rec["tokens_per_minute"] < 1e-3
    assert rec["plan_hash"] == plan.plan_hash and rec["source"] == "apply"
    assert "recorded, the next plan of this model uses it" in apply_text(r)

    ws.write_config(120)
    nxt, npath = api.make_plan(ws.config, out=ws.plans)
    c = nxt.body["cost"]
    assert c["rate_source"] == "apply" and c["tokens_per_minute"] == rec["tokens_per_minute"]
    m = c["rate_measured"]
    assert m["by"] == "reindex apply" and m["plan_hash"] == plan.plan_hash and m["machine"] == rec["machine"]
    assert m["at"].endswith("+00:00") and m["tokens"] == rec["tokens"]
    hours = nxt.body["work"]["tokens_to_embed"] / rec["tokens_per_minute"] / 60
    assert abs(c["hours"] - hours) < 1e-5
    # Every report form says where the rate comes from and when/where it was measured.
    said = "measured by the last `reindex apply` of this model"
    when = m["at"].replace("T", " ").replace("+00:00", " UTC")
    text = plan_text(nxt, npath)
    assert said in text and when in text and plan.plan_hash[:12] in text
    md = npath.with_suffix(".md").read_text()
    html = npath.with_suffix(".html").read_text()
    assert said in md and when in md
    assert "measured by the last" in html and when in html
    out = CliRunner().invoke(main, ["plan", "-c", str(ws.config), "--out", str(ws.plans), "--json"])
    d = json.loads(out.stdout)
    assert d["rate_source"] == "apply" and d["rate_measured"]["at"] == m["at"]
    assert d["tokens_per_minute"] == rec["tokens_per_minute"]


def test_precedence_config_then_apply_then_calibrate_then_default(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    state, vid = ws.state(), identity_of(ws.cfg()).vector_id

    def source() -> tuple[str, float]:
        c = api.make_plan(ws.config, out=None)[0].body["cost"]
        return c["rate_source"], c["tokens_per_minute"]

    assert source()[0] == "default"
    cal = api.calibrate(ws.config, chunks=4)
    assert source() == ("calibration", cal["tokens_per_minute"])
    state.put(f"calibration/{vid}.apply.json", json.dumps(
        {"tokens_per_minute": 61_234.5, "at": 1_700_000_000, "machine": "box (x86_64, 2 cpus)", "plan_hash": "ab" * 16,
         "tokens": 50_000, "seconds": 49.0}).encode())
    assert source() == ("apply", 61_234.5)  # apply's measurement wins over calibrate's sample
    plan = api.make_plan(ws.config, out=None)[0]
    assert plan.body["cost"]["rate_measured"]["at"] == "2023-11-14T22:13:20+00:00"
    ws.write_config(extra="cost: {tokens_per_minute: 1234}\n")
    assert source() == ("config", 1234)  # an explicit config wins over everything


def test_a_run_that_embedded_too_little_records_nothing(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "ws")
    first = ws.build_live()
    assert first
    before = _measured(ws)
    assert before is not None
    names = ws.edit_documents()
    plan, path = ws.plan()
    assert plan.kind == "document-scoped" and names
    r = ws.apply(path)
    assert 0 < r.report["actual"]["tokens_embedded"] < MIN_TOKENS_TO_MEASURE, r.report["actual"]
    assert r.report["throughput"]["recorded"] is None
    assert _measured(ws) == before  # the earlier, meaningful measurement stays


def test_the_what_if_current_row_is_the_plans_own_count(tmp_path: Path) -> None:
    for chunker in ("recursive, size: 150", "sentence, size: 200", "sliding, size: 256, overlap: 0.2"):
        ws = Workspace(tmp_path / chunker.split(",")[0])
        ws.config.write_text(ws.config.read_text().replace("kind: recursive, size: 150", f"kind: {chunker}"))
        for sample in (None, 12):
            plan = api.make_plan(ws.config, out=None, sample=sample)[0]
            w, rows = plan.body["work"], plan.body["sensitivity"]["what_if"]
            current = [r for r in rows if r["current"]]
            assert len(current) == 1, rows
            assert (current[0]["chunks"], current[0]["tokens_full_reembed"]) == (w["chunks_new"], w["tokens_new"]), (
                chunker, sample, current, w["chunks_new"])
            assert current[0]["method"] == ("this plan's projection (sampled)" if sample else "exact: this plan's chunks")
            others = [r for r in rows if not r["current"]]
            assert others and all(r["chunks"] > 0 for r in others)
            if not chunker.startswith("sliding") or sample:
                assert all("scaled" in r["method"] for r in others), others
            # Larger sizes never make more chunks than the current row, smaller ones never fewer.
            size = int(chunker.split("size: ")[1].split(",")[0])
            for r in others:
                s = float(r["chunker"].split("size")[1].lstrip("=≈").split(",")[0])
                if s > size and "overlap" not in r["chunker"]:
                    assert r["chunks"] <= current[0]["chunks"], (r, current)
