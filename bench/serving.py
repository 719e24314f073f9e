"""Serving across a model change on the shared corpus (issue 36): reindex's bridge and cascade beside the anchors'
maps (rebasis 0.1.0, isotrieve 0.4.0) fitted on the same free pairs, in both directions of MiniLM ↔ the static
model distilled from it.

For each direction the bench builds the live population with model A through reindex (plan, apply, cutover),
plans the change to model B with a forecast (its recommendation: reindex now / bridge / cascade / stay), and
applies it with ``serving.every_shards: 1`` — the serving modes are evaluated and gated after every committed
shard, in the apply's own process, and the serving record's history says after how many shards each mode first
passed its gate. Then, on the finished build:

* the full cutover's gain: ``evaluation.evaluate`` of the shadow against the live population (what a rebuild gives);
* at 500 / 1K / 2K / 4K free pairs (the build's own, read back from the state store): reindex's bridges (centred
  Procrustes, Procrustes through the origin, ridge) and the anchors' maps fitted on the same pairs — rebasis's ``CenteredProcrustesAdapter``,
  ``ProcrustesAdapter`` and ``LinearAdapter``, isotrieve's ``RidgeMapping`` (its ``OrthogonalProcrustesMapping``
  refuses different dimensions) — each evaluated by the same function against the live model: recall@10,
  nDCG@10, MRR with paired bootstrap intervals, and the fraction of the full gain each keeps (nDCG@10 and MRR,
  ratio of means with a bootstrap interval over the same query resamples);
* the cascade at N = 20, 50, 100 (reindex's: the live model recalls) and rebasis's arrangement (its centred
  Procrustes bridge recalls, the new model reranks: re-implemented with reindex's rerank, as its module describes
  it), quality as above, cost per query with the shadow built (vectors read by id) and cold (every candidate
  embedded with the real, uncached model).

The anchors are imported from their wheels unpacked under ``--anchors`` (rebasis declares Python ≥ 3.12: its
package ``__init__`` uses 3.12 syntax, so its ``rebasis`` and ``rebasis.core`` packages are stubbed and only the
adapter modules, which run on 3.11, are imported); absent wheels are skipped. Nothing is installed.

Run: ``nice .venv/bin/python bench/serving.py [--docs 220] [--shards 16] [--anchors /tmp/anchors]`` (PYTHONPATH=src,
HF_HUB_OFFLINE=1). Chunk vectors are cached under ``build/serving/cache`` (MiniLM once: ~5,000 chunks of 200
tokens). Prints the Markdown tables; writes ``build/serving/results.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time
import types
import zipfile
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
CORPUS = HERE.parent.parent / "shared" / "corpus"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus")
PAIR_COUNTS = (500, 1000, 2000, 4000)
CANDIDATES = (20, 50, 100)
METRICS = ("recall_at_10", "ndcg_at_10", "mrr")


# --------------------------------------------------------------------------------------------------------------
# Anchors
# --------------------------------------------------------------------------------------------------------------


def load_anchors(folder: Path, out: Path) -> dict[str, object]:
    """name → fit(src, dst) returning a callable map, for every anchor map whose wheel is there."""
    maps: dict[str, object] = {}
    wheels = {w.name.split("-")[0]: w for w in folder.glob("*.whl")} if folder.is_dir() else {}
    for name, wheel in wheels.items():
        target = out / "anchors" / wheel.stem
        if not target.is_dir():
            with zipfile.ZipFile(wheel) as z:
                z.extractall(target)
        sys.path.insert(0, str(target))
    if "rebasis" in wheels:
        root = out / "anchors" / wheels["rebasis"].stem / "rebasis"
        for pkg, path in (("rebasis", root), ("rebasis.core", root / "core")):
            if pkg not in sys.modules:
                m = types.ModuleType(pkg)
                m.__path__ = [str(path)]
                sys.modules[pkg] = m
        try:
            from rebasis.core.linear import LinearAdapter
            from rebasis.core.procrustes import CenteredProcrustesAdapter, ProcrustesAdapter

            for label, cls in (("rebasis procrustes_centered", CenteredProcrustesAdapter),
                               ("rebasis procrustes", ProcrustesAdapter), ("rebasis linear (ridge)", LinearAdapter)):
                maps[label] = (lambda c: lambda x, y: c.fit(x, y).apply)(cls)
        except Exception as err:  # noqa: BLE001 - an anchor that does not import is skipped, saying why
            print(f"rebasis skipped: {type(err).__name__}: {err}", file=sys.stderr)
    if "isotrieve" in wheels:
        try:
            import warnings

            from isotrieve.mapping.linear import RidgeMapping

            def iso(x, y):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    return RidgeMapping().fit(x.astype(np.float64), y.astype(np.float64)).transform

            maps["isotrieve ridge"] = iso
        except Exception as err:  # noqa: BLE001
            print(f"isotrieve skipped: {type(err).__name__}: {err}", file=sys.stderr)
    return maps


# --------------------------------------------------------------------------------------------------------------
# Corpus and workspace
# --------------------------------------------------------------------------------------------------------------


def prepare_corpus(out: Path, docs: int, seed: int = 0) -> tuple[Path, Path, int]:
    """The 84 PEPs English queries point at plus seeded others, as files; the English queries file."""
    import pyarrow.parquet as pq

    rows = pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pylist()
    queries = [json.loads(ln) for ln in (CORPUS / "queries.jsonl").read_text(encoding="utf-8").splitlines() if ln]
    en = [q for q in queries if q["lang"] == "en"]
    wanted = {q["doc_path"] for q in en}
    others = sorted(r["doc_id"] for r in rows if r["doc_id"] not in wanted)
    random.Random(seed).shuffle(others)
    chosen = wanted | set(others[: max(0, docs - len(wanted))])
    folder = out / "corpus"
    if folder.exists():
        shutil.rmtree(folder)
    for r in rows:
        if r["doc_id"] in chosen:
            p = folder / r["doc_id"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(r["text"], encoding="utf-8")
    qfile = out / "queries_en.jsonl"
    qfile.write_text("".join(json.dumps({k: q[k] for k in ("query_id", "query", "doc_path", "evidence", "lang")})
                             + "\n" for q in en), encoding="utf-8")
    return folder, qfile, len(chosen)


def config_text(corpus: Path, qfile: Path, vector: str, shards: int) -> str:
    return (f"index: peps\nsource: {corpus}\ntext: {{chunker: {{kind: recursive, size: 200}}}}\n{vector}\n"
            f"apply: {{shards: {shards}}}\ncost: {{tokens_per_minute: 100000}}\n"
            "cutover: {min_recall_delta: -1.0, min_overlap: 0.0, cannot_tell: pass}\n"
            f"serving: {{pairs: 4096, min_pairs: 500, every_shards: 1, queries: {qfile}}}\n")


# --------------------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------------------


def rows_diffs(evaluation: dict, metric: str) -> np.ndarray:
    return np.array([r[f"{metric}_new"] - r[f"{metric}_old"] for r in evaluation["rows"] if f"{metric}_old" in r])


def retained(mode_eval: dict, full_eval: dict, metric: str, seed: int = 0, resamples: int = 2000) -> dict:
    """Mean(mode − old) / mean(rebuild − old) over the same queries, with a percentile interval from resampling
    queries jointly (the two evaluations list the queries in the same order)."""
    a, b = rows_diffs(mode_eval, metric), rows_diffs(full_eval, metric)
    if b.mean() <= 0:
        return {"retained": None}
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(a), size=(resamples, len(a)))
    den = b[idx].mean(axis=1)
    ratios = np.where(den > 0, a[idx].mean(axis=1) / np.where(den > 0, den, 1), np.nan)
    ratios = ratios[~np.isnan(ratios)]
    return {"retained": float(a.mean() / b.mean()), "low": float(np.quantile(ratios, 0.025)),
            "high": float(np.quantile(ratios, 0.975))}


def summary(evaluation: dict, full: dict | None) -> dict:
    agg = evaluation["aggregate"]
    out = {}
    for m in METRICS:
        d = agg[f"{m}_diff"]
        out[m] = {"old": agg[f"{m}_old"], "new": agg[f"{m}_new"], "diff": d["mean"], "low": d["low"],
                  "high": d["high"]}
    if full is not None:
        for m in ("ndcg_at_10", "mrr"):
            out[f"retained_{m}"] = retained(evaluation, full, m)
    return out


def run_direction(name: str, old_model: str, new_model: str, corpus: Path, qfile: Path, out: Path, shards: int,
                  anchors: dict) -> dict:
    from reindex.api import Index
    from reindex.decisions.evaluation import evaluate, read_queries
    from reindex.books.manifests import read_live, read_serving
    from reindex.books.pairs import read_pairs
    from reindex.decisions.serving import ModeInputs, cascade_rerank, evaluate_modes, fit_procrustes, fit_ridge
    from reindex.adapters.sources.extract import normalise
    from reindex.context import backends
    from serving_models import CachedEmbeddings, real_embedder, vector_line

    ws = out / name
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    config = ws / "reindex.yaml"
    config.write_text(config_text(corpus, qfile, vector_line(old_model), shards), encoding="utf-8")
    result: dict = {"direction": name}
    t0 = time.perf_counter()
    with Index.open(config) as ix:
        plan, path = ix.plan(out=ws / "plans")
        ix.approve(path, by="bench")
        ix.apply(path)
        assert ix.cutover(path).report["swap"]
    result["live_build_s"] = round(time.perf_counter() - t0, 1)
    config.write_text(config_text(corpus, qfile, vector_line(new_model), shards), encoding="utf-8")
    t0 = time.perf_counter()
    with Index.open(config) as ix:
        plan, path = ix.plan(out=ws / "plans", forecast=100, queries=qfile)
        fc = plan.body["forecast"]
        result["forecast"] = {"verdict": fc["verdict"], "serving": fc.get("serving"),
                              "ndcg_at_10": fc["metrics"].get("ndcg_at_10"), "sample": fc["sample_documents"]}
        result["forecast_s"] = round(time.perf_counter() - t0, 1)
        ix.approve(path, by="bench")
        t0 = time.perf_counter()
        report = ix.apply(path)
        result["shadow_build_s"] = round(time.perf_counter() - t0, 1)
        shadow = report.collection
        cfg = ix.config
    state = backends.state_store(cfg)
    rec = read_serving(state, "peps")
    result["history"] = rec.get("history", [])
    result["final_mode"] = rec["mode"]
    first_pass = {}
    for h in result["history"]:
        for m, ok in h["passed"].items():
            if ok and m not in first_pass:
                first_pass[m] = {"shards": h["shards_done"], "pairs": h["pairs"]}
    result["first_pass"] = first_pass
    live = read_live(state, "peps")
    new_cfg = cfg
    old_q = CachedEmbeddings(old_model)
    new_q = CachedEmbeddings(new_model)
    embed_old = lambda t: np.asarray(old_q.embed_documents(t), np.float32)  # noqa: E731
    embed_new = lambda t: np.asarray(new_q.embed_documents(t), np.float32)  # noqa: E731
    qs = read_queries(qfile)
    store = backends.vector_store_for(cfg)
    try:
        norm = partial(normalise, cfg=live.config.text.normaliser)

        def ev(new_collection, emb_new, search_new=None):
            return evaluate(store, live.collection, new_collection, qs, embed_old, emb_new, k=10, seed=0,
                            payload_old=live.config.payload, payload_new=live.config.payload, text_old=norm,
                            text_new=norm, search_new=search_new)

        full = ev(shadow, embed_new)
        result["full"] = summary(full, None)
        pairs = read_pairs(state, "peps", shadow, plan.plan_hash)
        result["pairs_total"] = pairs.n
        sweep = {}
        for n in PAIR_COUNTS:
            if n > pairs.n:
                continue
            sub = pairs.first(n)
            row = {}
            for label, bridge in (("reindex procrustes", fit_procrustes(sub)),
                                  ("reindex procrustes-uncentred", fit_procrustes(sub, centre=False)),
                                  ("reindex ridge", fit_ridge(sub))):
                row[label] = summary(ev(live.collection, lambda t, b=bridge: b.map(embed_new(t))), full)
            for label, fit in anchors.items():
                try:
                    f = fit(sub.new, sub.old)
                except Exception as err:  # noqa: BLE001 - an anchor that refuses these pairs says why
                    row[label] = {"error": f"{type(err).__name__}: {err}"}
                    continue

                def mapped(t, f=f):
                    y = np.asarray(f(embed_new(t)), np.float32)
                    return y / np.maximum(np.linalg.norm(y, axis=1, keepdims=True), 1e-12)

                row[label] = summary(ev(live.collection, mapped), full)
            sweep[n] = row
        result["bridges"] = sweep
        # The cascade at N candidates (the live model recalls), and rebasis's arrangement (its bridge recalls).
        casc = {}
        from types import SimpleNamespace

        for n in CANDIDATES:
            serving = SimpleNamespace(**{**cfg.serving.model_dump(), "candidates": n, "mode": "cascade"})
            modes, _ = evaluate_modes(ModeInputs(store=store, live=live.collection, shadow=shadow, live_cfg=live.config,
                                                 new_cfg=new_cfg, queries=qs, embed_old=embed_old, embed_new=embed_new,
                                                 embed_passages=embed_new, serving=serving, cutover=cfg.cutover,
                                                 pairs=None), ("cascade",))
            costs = []

            def search(vo, vn, n=n, costs=costs):
                from reindex.decisions.evaluation import side_of_hits

                hits, cost = cascade_rerank(store, live.collection, shadow, vo, vn, candidates=n,
                                            new_vector_id=modes_vid(new_cfg), payload=live.config.payload,
                                            embed_passages=embed_new, distance="cosine")
                costs.append(cost)
                return side_of_hits(hits, cost["ms"] / 1000, live.config.payload)

            e = ev(live.collection, embed_new, search)
            casc[n] = {**summary(e, full), "gate_passed": modes["cascade"]["passed"], "cost_built": modes["cascade"]["cost"]}
        if "rebasis procrustes_centered" in anchors and pairs.n >= 4000:
            adapter = anchors["rebasis procrustes_centered"](pairs.first(4000).new, pairs.first(4000).old)

            def rb_search(vo, vn):
                from reindex.decisions.evaluation import side_of_hits

                vq = np.asarray(adapter(np.asarray([vn], np.float32)), np.float32)[0]
                hits, cost = cascade_rerank(store, live.collection, shadow, vq, vn, candidates=100,
                                            new_vector_id=modes_vid(new_cfg), payload=live.config.payload,
                                            embed_passages=embed_new, distance="cosine")
                return side_of_hits(hits, cost["ms"] / 1000, live.config.payload)

            casc["rebasis cascade (bridge recall, N=100, 4K pairs)"] = summary(ev(live.collection, embed_new, rb_search),
                                                                            full)
        result["cascade"] = casc
        # Cold cost: every candidate embedded with the real model, no cache, no shadow (5 queries per N).
        real = real_embedder(new_model)
        cold = {}
        for n in CANDIDATES:
            ms, emb = [], []
            for q in qs[:5]:
                vo, vn = embed_old([q.text])[0], embed_new([q.text])[0]
                t = time.perf_counter()
                hits, cost = cascade_rerank(store, live.collection, None, vo, vn, candidates=n,
                                            new_vector_id=modes_vid(new_cfg), payload=live.config.payload,
                                            embed_passages=lambda texts: real.embed(texts).vectors, distance="cosine")
                ms.append((time.perf_counter() - t) * 1000)
                emb.append(cost["embedded"])
            cold[n] = {"ms_mean": float(np.mean(ms)), "embedded_per_query": float(np.mean(emb)), "queries": len(ms)}
        result["cascade_cold"] = cold
    finally:
        store.close()
    result["embedded"] = {"computed": dict(CachedEmbeddings.computed), "cpu_seconds": dict(CachedEmbeddings.cpu_seconds)}
    return result


def modes_vid(cfg) -> str:
    from reindex.domain.identity import identity_of

    return identity_of(cfg).vector_id


# --------------------------------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------------------------------


def fmt(d: dict) -> str:
    return f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def fmt_kept(d: dict) -> str:
    if not d or d.get("retained") is None:
        return "—"
    return f"{d['retained']:.2f} [{d['low']:.2f}, {d['high']:.2f}]"


def render(results: list[dict]) -> str:
    out = []
    for r in results:
        f = r["full"]
        out.append(f"\n### {r['direction']}\n")
        out.append(f"Full rebuild vs live ({len(r['history'])} evaluations during the build; {r['pairs_total']:,} free "
                   f"pairs kept): " + "; ".join(f"{m} {f[m]['old']:.3f} → {f[m]['new']:.3f} ({fmt(f[m])})"
                                                for m in METRICS))
        sv = (r["forecast"] or {}).get("serving") or {}
        out.append(f"\nForecast (sample of {r['forecast']['sample']} documents): verdict {r['forecast']['verdict']}; "
                   f"recommendation **{sv.get('recommendation')}** — {sv.get('reason')}")
        out.append(f"\nServing during the build: final mode `{r['final_mode']}`; first shard at which each mode passed "
                   f"its gate: " + (", ".join(f"{m} after {v['shards']} shards ({v['pairs']:,} pairs)"
                                              for m, v in r["first_pass"].items()) or "none passed"))
        hist = " ".join(f"{h['shards_done']}:{h['mode'][0]}" for h in r["history"])
        out.append(f"(mode after each shard, o/b/c: {hist})\n")
        out.append("| pairs | map | recall@10 Δ | nDCG@10 Δ | MRR Δ | kept of the rebuild's nDCG@10 gain | kept (MRR) |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        for n, row in r["bridges"].items():
            for label, s in row.items():
                if "error" in s:
                    out.append(f"| {n} | {label} | {s['error']} | | | | |")
                    continue
                out.append(f"| {n} | {label} | {fmt(s['recall_at_10'])} | {fmt(s['ndcg_at_10'])} | {fmt(s['mrr'])} | "
                           f"{fmt_kept(s.get('retained_ndcg_at_10'))} | {fmt_kept(s.get('retained_mrr'))} |")
        out.append("\n| cascade | recall@10 Δ | nDCG@10 Δ | MRR Δ | kept (nDCG@10) | kept (MRR) | gate |")
        out.append("| --- | --- | --- | --- | --- | --- | --- |")
        for n, s in r["cascade"].items():
            label = f"reindex N={n}" if isinstance(n, int) or str(n).isdigit() else n
            out.append(f"| {label} | {fmt(s['recall_at_10'])} | {fmt(s['ndcg_at_10'])} | {fmt(s['mrr'])} | "
                       f"{fmt_kept(s.get('retained_ndcg_at_10'))} | {fmt_kept(s.get('retained_mrr'))} | "
                       f"{'passes' if s.get('gate_passed') else ('refused' if 'gate_passed' in s else '—')} |")
        out.append("\n| N | built: ms p50 / mean per query | built: read from the shadow / embedded per query | "
                   "cold (nothing built, real model): ms per query | cold: embedded per query |")
        out.append("| --- | --- | --- | --- | --- |")
        for n, s in r["cascade"].items():
            if not (isinstance(n, int) or str(n).isdigit()):
                continue
            c = s["cost_built"]
            cold = r["cascade_cold"].get(n) or r["cascade_cold"].get(str(n))
            out.append(f"| {n} | {c['ms_p50']:.1f} / {c['ms_mean']:.1f} | {c['from_shadow_per_query']:g} / "
                       f"{c['embedded_per_query']:g} | {cold['ms_mean']:.0f} | {cold['embedded_per_query']:g} |")
    return "\n".join(out)


def probes_check(ws: Path, probes: int) -> dict:
    """The finished build of ``ws`` evaluated again by ``reindex serving --evaluate``, on ``probes`` known-item probes
    sampled from the corpus instead of the labelled file (``serving.queries`` removed, ``cutover.probes`` set):
    more queries, the same gate. Through a reader, as any process but the apply's: the cascade embeds its
    candidates (here from the cache)."""
    from reindex.api import Index

    config = ws / "reindex.yaml"
    text = config.read_text(encoding="utf-8")
    edited = text.replace("cutover: {", f"cutover: {{probes: {probes}, ", 1)
    edited = edited[: edited.index(", queries: ")] + "}\n" if ", queries: " in edited else edited
    config.write_text(edited, encoding="utf-8")
    try:
        with Index.open(config) as ix:
            r = ix.serving(evaluate=True)
    finally:
        config.write_text(text, encoding="utf-8")
    return {"mode": r.mode, "queries": r.evidence["queries"], "pairs": r.evidence["pairs"],
            "modes": {m: {"passed": e.get("passed"), "gate": e.get("gate"), "bridge": (e.get("bridge") or {}).get("kind"),
                          "cost": e.get("cost")} for m, e in r.evidence["modes"].items()}}


# --------------------------------------------------------------------------------------------------------------
# What a reader in another process pays for the cascade as a MiniLM build advances (issue 42)
# --------------------------------------------------------------------------------------------------------------


class _StopAfter:
    """A runner that commits the first ``n`` shards of the job, then stops like a killed apply (what it committed
    stays, shared with readers; the next apply resumes)."""

    name = "stop-after"

    def __init__(self, n: int) -> None:
        self.n = n

    def run(self, ctx, job):
        from reindex.engine import execution

        for k in job.shards[:self.n]:
            execution.run_shard(ctx, k)
        raise RuntimeError(f"stopped after {self.n} shards")


def readers_corpus(out: Path, docs: int) -> tuple[Path, Path]:
    """The first ``docs`` PEPs (sorted) that English queries point at, and those queries."""
    import pyarrow.parquet as pq

    queries = [json.loads(ln) for ln in (CORPUS / "queries.jsonl").read_text(encoding="utf-8").splitlines() if ln]
    en = [q for q in queries if q["lang"] == "en"]
    chosen = set(sorted({q["doc_path"] for q in en})[:docs])
    folder = out / "corpus"
    if folder.exists():
        shutil.rmtree(folder)
    for r in pq.read_table(CORPUS / "snapshot_new.parquet", columns=["doc_id", "text"]).to_pylist():
        if r["doc_id"] in chosen:
            p = folder / r["doc_id"]
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(r["text"], encoding="utf-8")
    qfile = out / "queries_readers.jsonl"
    qfile.write_text("".join(json.dumps({k: q[k] for k in ("query_id", "query", "doc_path", "evidence", "lang")})
                             + "\n" for q in en if q["doc_path"] in chosen), encoding="utf-8")
    return folder, qfile


def probe(config: Path, texts_file: Path) -> dict:
    """In this process (another process than the bench's): a held reader (``Querier``) asks each text once in the
    serving mode the index's record names; per query its wall ms and what it read and embedded. The first query
    (the model's load and the opening of the shadow included) is reported apart."""
    from reindex.api import Querier

    texts = json.loads(texts_file.read_text(encoding="utf-8"))
    rows = []
    with Querier(config) as q:
        for t in texts:
            t0 = time.perf_counter()
            r = q.query(t, k=10)
            rows.append({"ms": (time.perf_counter() - t0) * 1000, "mode": r.mode, **r.serving})
    first, held = rows[0], rows[1:]
    ms = sorted(r["ms"] for r in held)
    n = len(held)
    return {"mode": first["mode"], "first_query_ms": round(first["ms"], 1), "queries": n,
            "reader_ms_p50": round(ms[n // 2], 1), "reader_ms_p95": round(ms[min(n - 1, round(0.95 * (n - 1)))], 1),
            "embedded_per_query": round(sum(r.get("embedded", 0) for r in held) / n, 2),
            "from_shadow_per_query": round(sum(r.get("from_shadow", 0) for r in held) / n, 2),
            "candidates_per_query": round(sum(r.get("candidates", 0) for r in held) / n, 2)}


def reader_side(out: Path, docs: int, shards: int, candidates: int, n_queries: int) -> dict:
    """Live: the hash embedder (its recall is what the cascade reranks; its quality is not the point); new: MiniLM
    (the packaged all-MiniLM-L6-v2, uncached: a reader embeds for real). At 0 %, 50 % and 100 % of the MiniLM
    build (shards committed by the build, then the apply stopped; the last one finished), the serving record is set
    to the cascade and (a) another process (``probe``) asks ``n_queries`` + 1 queries through a held reader, (b) the
    gate's own measurement (:func:`reindex.decisions.serving.measure_reader`) runs in this process through a fresh
    reader opened as another process opens it, on the same texts: the approximation the gate makes, side by side."""
    from reindex.api import Index
    from reindex.books.manifests import read_live, read_serving, write_serving
    from reindex.decisions.cutover import populations
    from reindex.decisions.serving import EvaluationMemo, ModeQuery, measure_native, measure_reader, reader_passages

    corpus, qfile = readers_corpus(out, docs)
    texts = [json.loads(ln)["query"] for ln in qfile.read_text(encoding="utf-8").splitlines() if ln][:n_queries + 1]
    texts_file = out / "reader_texts.json"
    texts_file.write_text(json.dumps(texts), encoding="utf-8")
    ws = out / "readers"
    if ws.exists():
        shutil.rmtree(ws)
    ws.mkdir(parents=True)
    config = ws / "reindex.yaml"

    def write(vector: str) -> None:
        config.write_text(f"index: peps\nsource: {corpus}\ntext: {{chunker: {{kind: recursive, size: 200}}}}\n"
                          f"{vector}\napply: {{shards: {shards}}}\n"
                          f"serving: {{mode: cascade, candidates: {candidates}, queries: {qfile}}}\n", encoding="utf-8")

    write("vector: {provider: hash}")
    with Index.open(config) as ix:
        plan, path = ix.plan(out=ws / "plans")
        ix.approve(path, by="bench")
        ix.apply(path)
        ix.cutover(path)
    write("vector: {provider: sentence-transformers}")
    result: dict = {"docs": docs, "shards": shards, "candidates": candidates, "queries": n_queries, "points": []}
    with Index.open(config) as ix:
        plan, path = ix.plan(out=ws / "plans")
        ix.approve(path, by="bench")
    chunks = plan.body["work"]["chunks_new"]
    result["chunks"] = chunks
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(HERE.parent / "src"),
                                                                       os.environ.get("PYTHONPATH"))))}
    build_s = 0.0
    for done, runner in ((0, _StopAfter(0)), (shards // 2, _StopAfter(shards // 2)), (shards, None)):
        t0 = time.perf_counter()
        with Index.open(config) as ix:
            try:
                ix.apply(path, runner=runner) if runner is not None else ix.apply(path)
            except RuntimeError:
                pass
            cfg = ix.context.config
            state = ix.context.state
            live = read_live(state, "peps")
            shadow = next(p for p in populations(state, "peps") if p.collection != live.collection
                          and p.state.value in ("building", "ready"))
            build_s += time.perf_counter() - t0
            write_serving(state, "peps", {"mode": "cascade", "live": live.collection, "shadow": shadow.collection,
                                          "candidates": candidates, "since": time.time(), "reason": "bench",
                                          "evidence": {}})
            # (b) the gate's measurement, in this process, through a reader opened as another process opens it
            reader = ix.context.reader()
            try:
                old, new = ix.context.side(live), ix.context.side(shadow)
                memo = EvaluationMemo()
                c0 = time.process_time()
                native = measure_native(reader, live.collection, texts[1:], memo, embed_old=old.embed_queries,
                                        embed_new=new.embed_queries, k=10)
                inproc = measure_reader(ModeQuery(reader, live.collection, "cascade", shadow.collection, None,
                                                  old.embed_queries, new.embed_queries, reader_passages(new),
                                                  candidates, shadow.vector_id, live.config.payload,
                                                  new.vector.distance), texts[1:], memo, k=10)
                inproc["cpu_s"] = round(time.process_time() - c0, 2)
            finally:
                reader.close()
        # (a) another process
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, str(HERE / "serving.py"), "--probe", str(config), str(texts_file)],
                           capture_output=True, text=True, env=env, timeout=3600)
        assert r.returncode == 0, r.stderr[-3000:]
        other = json.loads(r.stdout.strip().splitlines()[-1])
        other["process_s"] = round(time.perf_counter() - t0, 1)
        load = os.getloadavg()[0]
        result["points"].append({"shards_done": done, "built": f"{done / shards:.0%}", "other_process": other,
                                 "in_process": inproc, "native": native, "load": round(load, 1)})
        print(f"readers at {done}/{shards} shards: {json.dumps(result['points'][-1])}", file=sys.stderr)
    result["build_s"] = round(build_s, 1)
    with Index.open(config) as ix:
        result["status_serving"] = read_serving(ix.context.state, "peps")
    return result


def render_readers(r: dict) -> str:
    head = ("| built | another process: p50 / p95 ms | embedded / from shadow per query | first query ms (model load, "
            "shadow open) | gate's in-process reader: p50 / p95 ms | embedded / from shadow | old natively p95 ms "
            "| load |\n|---|---|---|---|---|---|---|---|")
    rows = []
    for p in r["points"]:
        o, i = p["other_process"], p["in_process"]
        rows.append(f"| {p['built']} ({p['shards_done']}/{r['shards']} shards) | {o['reader_ms_p50']:,.1f} / "
                    f"{o['reader_ms_p95']:,.1f} | {o['embedded_per_query']:g} / {o['from_shadow_per_query']:g} | "
                    f"{o['first_query_ms']:,.0f} | {i['reader_ms_p50']:,.1f} / {i['reader_ms_p95']:,.1f} | "
                    f"{i['embedded_per_query']:g} / {i['from_shadow_per_query']:g} | "
                    f"{p['native']['old']['reader_ms_p95']:,.1f} | {p['load']} |")
    return "\n".join([head, *rows])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=220)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--anchors", type=Path, default=Path("/tmp/anchors"))
    ap.add_argument("--out", type=Path, default=Path("build/serving"))
    ap.add_argument("--only", choices=("minilm-to-static", "static-to-minilm"), default=None)
    ap.add_argument("--probes", type=int, default=0, help="Also evaluate each finished build on N probes.")
    ap.add_argument("--reuse", action="store_true", help="With --probes: only that, on the builds of an earlier run.")
    ap.add_argument("--readers", action="store_true",
                    help="Only what a reader in another process pays for the cascade at 0 %%, 50 %% and 100 %% of a "
                         "MiniLM build (with --docs, --shards, --candidates, --queries).")
    ap.add_argument("--candidates", type=int, default=50)
    ap.add_argument("--queries", type=int, default=8)
    ap.add_argument("--probe", nargs=2, type=Path, metavar=("CONFIG", "TEXTS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.probe:
        print(json.dumps(probe(*args.probe)))
        return
    args.out = args.out.resolve()
    if not (CORPUS / "snapshot_new.parquet").is_file():
        print(f"skipped: the shared corpus is not at {CORPUS}")
        return
    os.environ.setdefault("REINDEX_BENCH_CACHE", str(Path("build/serving/cache").resolve()))  # shared by every --out
    # One shard at a time: the apply re-evaluates the modes after each committed shard, and each evaluation sees
    # exactly one more shard (with concurrent shards several finish while one evaluation runs).
    os.environ.setdefault("REINDEX_SHARD_WORKERS", "1")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.readers:
        r = reader_side(args.out, args.docs, args.shards, args.candidates, args.queries)
        (args.out / "readers.json").write_text(json.dumps(r, indent=1, default=str), encoding="utf-8")
        print(render_readers(r))
        return
    anchors = load_anchors(args.anchors, args.out)
    print(f"anchors: {', '.join(anchors) or 'none (skipped)'}", file=sys.stderr)
    if args.reuse:
        for name in ("minilm-to-static", "static-to-minilm"):
            if (args.out / name / "reindex.yaml").is_file() and args.only in (None, name):
                print(f"### {name}: {args.probes} probes\n\n```json\n"
                      f"{json.dumps(probes_check(args.out / name, args.probes), indent=1)}\n```")
        return
    corpus, qfile, n_docs = prepare_corpus(args.out, args.docs)
    results = []
    for name, a, b in (("minilm-to-static", "minilm", "static"), ("static-to-minilm", "static", "minilm")):
        if args.only and args.only != name:
            continue
        t0 = time.perf_counter()
        r = run_direction(name, a, b, corpus, qfile, args.out, args.shards, anchors)
        if args.probes:
            r["probes"] = probes_check(args.out / name, args.probes)
        r["seconds"] = round(time.perf_counter() - t0, 1)
        r["documents"] = n_docs
        results.append(r)
        print(f"{name}: {r['seconds']} s", file=sys.stderr)
        (args.out / "results.json").write_text(json.dumps(results, indent=1, default=str), encoding="utf-8")
    print(render(results))


if __name__ == "__main__":
    main()
