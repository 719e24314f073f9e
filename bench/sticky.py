"""Sticky (edit-aware) re-chunking against stateless chunkers: R_c on revision pairs, tokens embedded
over revision chains, drift, and retrieval on a chain's final revision.

Parts (``--parts pairs,chains,retrieval``):

* ``pairs``: the ≤ 5 % band of the dev pairs, minus the same held-out 10 % of documents as
  ``bench/measure_dev.py`` (so the pairs are those of the recorded public-chunker run), each chunker
  statelessly and in sticky mode (``reindex.measure.sticky.measure_sticky``), paired bootstrap over
  documents; the best public chunker per language is read from the recorded run
  (``bench/out/measure-dev-le05/measure.json``), not re-measured.
* ``chains``: the last 21 distinct texts (20 revisions) of files with at least that many in the git
  histories of python/peps and Snailclimb/JavaGuide (``fetch`` mirrors; give ``--peps`` and
  ``--javaguide``): R_c per revision and tokens embedded after the initial build, sticky vs the
  stateless default vs re-embedding every edited document; drift with drift control off.
* ``retrieval``: every English query document's last ≤ 21 texts up to the snapshot commit (across
  renames),
  re-chunked in sticky mode; the final sticky chunks vs a fresh cut of the same texts through
  ``reindex.measure.evaluate_retrieval`` (MiniLM, 2,048-token budget).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/sticky.py --peps /work/.mirror/python+peps/repo \\
        --javaguide /work/.mirror/Snailclimb+JavaGuide/repo --json build/sticky.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from reindex import measure as m  # noqa: E402
from reindex.measure import sticky as ms  # noqa: E402
from reindex.adapters.chunkers import make_chunker  # noqa: E402
from reindex.adapters.chunkers.sticky import StickyConfig  # noqa: E402
from reindex.domain.config import CHUNKER_KINDS, RechunkConfig  # noqa: E402
from reindex.adapters.tokenizers import load_tokenizer  # noqa: E402

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[1] / "shared" / "corpus"
RECORDED = HERE / "out" / "measure-dev-le05" / "measure.json"
DEFAULT = "recursive:size=250"
# Length-matched settings of the recorded run (median ≈ 250 on the held-out split).
MATCHED = ("recursive:size=278", "anchored:size=286")
PEPS_HEAD = "ba4deeb7969588d937da609008d05bb83a47b1ab"
ZH_EXCLUDE = re.compile(r"^docs/(high-quality-technical-articles|about-the-author|zhuanlan)/|(^|/)(home|readme)\.md$")
ZH_CREDIT = re.compile(r"原文地址|原文链接|转载|本文来自|作者:|作者：|投稿|已获得作者授权")
CJK = re.compile(r"[\u4e00-\u9fff]")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def best_public(path: Path) -> dict[str, dict]:
    """Per language: the public chunker with the lowest mean R_c on ≤ 5 % in the recorded run."""
    rec = json.loads(path.read_text(encoding="utf-8"))
    out: dict[str, dict] = {}
    for c in rec["chunkers"]:
        if c["spec"].split(":")[0] in CHUNKER_KINDS:
            continue
        for b in c["bands"]:
            if b["band"] == "<=5%" and b["lang"] in ("en", "zh") and b["rc_mean"] is not None:
                if b["lang"] not in out or b["rc_mean"] < out[b["lang"]]["rc_mean"]:
                    out[b["lang"]] = {"spec": c["spec"], "rc_mean": b["rc_mean"], "pairs": b["pairs"],
                                      "median": c["median_chunk_tokens_by_lang"][b["lang"]]}
    return out


def part_pairs(tok, args) -> dict:
    pairs = m.select_pairs(m.load_pairs(args.pairs), bands=["<=5%"])
    held, pairs = m.calibration_split(pairs)
    log(f"pairs: {len(pairs)} (held out {len(held)} as in measure_dev.py)")
    report = ms.measure_sticky([DEFAULT, *MATCHED], pairs, tok, source="revisions.parquet <=5%", with_stateless=True,
                               progress=lambda s: log("  " + s))
    best = best_public(RECORDED)
    # The reuse floor per pair (the least R_c any scheme keeping whole old chunks can reach), per chunker.
    floors = {}
    for spec in (DEFAULT, *MATCHED):
        chunker, cfg = make_chunker(spec, tok), StickyConfig.of(spec, RechunkConfig(mode="sticky"))
        floors[ms.sticky_spec(spec)] = {p.pair_id: ms.floor_pair(chunker, tok, cfg, p) for p in pairs}
    rows = []
    for c in report.chunkers:
        row = {"spec": c.spec, "median": c.median_chunk_tokens, "median_by_lang": c.median_by_lang,
               "no_edit_rc": c.no_edit_rc, "failures": c.failures}
        for lang in ("en", "zh"):
            res = [r for r in c.results if r.lang == lang and r.error is None]
            mean, low, high = m.bootstrap_mean([r.rc for r in res], [r.doc_key for r in res])
            row[lang] = {"rc_mean": mean, "low": low, "high": high, "pairs": len(res)}
            if lang in best:
                row[lang]["ratio_to_best_public"] = [mean / best[lang]["rc_mean"], low / best[lang]["rc_mean"],
                                                     high / best[lang]["rc_mean"]]
            if c.spec in floors:
                fl = [floors[c.spec][r.pair_id] for r in res]
                f_mean, f_low, f_high = m.bootstrap_mean(fl, [r.doc_key for r in res])
                row[lang]["floor"] = {"rc_mean": f_mean, "low": f_low, "high": f_high}
                if lang in best:
                    row[lang]["floor"]["ratio_to_best_public"] = [f_mean / best[lang]["rc_mean"], f_low / best[lang]["rc_mean"],
                                                                  f_high / best[lang]["rc_mean"]]
                # Sticky above its floor, paired over the same pairs (points).
                row[lang]["sticky_minus_floor_points"] = list(m.bootstrap_mean([100 * (r.rc - f) for r, f in zip(res, fl)],
                                                                               [r.doc_key for r in res]))
        rows.append(row)
    diffs = [d for d in report.paired if d["band"] == "<=5%" and d["b"] == ms.sticky_spec(d["a"])]
    # What the lower size bound costs: the same sticky run with no merge of small gaps (lo = 1).
    loose = ms.measure_sticky([MATCHED[0]], pairs, tok, source="no merges", rechunk=RechunkConfig(mode="sticky", min_share=0.001))
    no_merge = {b.lang: b.rc_mean for b in loose.chunkers[0].bands if b.band == "<=5%" and b.lang in ("en", "zh")}
    return {"pairs": len(pairs), "best_public": best, "rows": rows, "sticky_minus_stateless": diffs,
            "no_merge_rc_mean": {"spec": loose.chunkers[0].spec, **no_merge},
            "warnings": list(report.warnings), "seconds": round(report.seconds, 1)}


def _peps_paths(git_dir: str, need: int) -> list[str]:
    log_out = ms.git_bytes(git_dir, "log", "--no-merges", "--format=", "--name-only", PEPS_HEAD, "--", "peps/pep-*.rst").decode()
    counts: dict[str, int] = {}
    for line in log_out.split():
        counts[line] = counts.get(line, 0) + 1
    out = []
    for path, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < need:
            break
        try:
            head = ms.git_bytes(git_dir, "show", f"{PEPS_HEAD}:{path}").decode("utf-8")
        except Exception:  # noqa: BLE001, S112 - removed at HEAD or not UTF-8: not a candidate
            continue
        if re.search(r"public domain|CC0", head, re.I):
            out.append(path)
    return out


def _zh_paths(git_dir: str, need: int, limit: int) -> list[str]:
    log_out = ms.git_bytes(git_dir, "log", "--no-merges", "--since=2020-03-14", "--format=", "--name-only", "--", "docs/*.md").decode("utf-8", "replace")
    counts: dict[str, int] = {}
    for line in log_out.splitlines():
        if line.strip():
            counts[line.strip()] = counts.get(line.strip(), 0) + 1
    out = []
    for path, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < need or len(out) >= limit:
            break
        if path.startswith('"') or ZH_EXCLUDE.search(path):
            continue
        try:
            head = ms.git_bytes(git_dir, "show", f"HEAD:{path}").decode("utf-8")
        except Exception:  # noqa: BLE001, S112 - not at HEAD or not UTF-8: not a candidate
            continue
        nonspace = len(re.sub(r"\s", "", head)) or 1
        if ZH_CREDIT.search(head) or len(CJK.findall(head)) / nonspace < 0.10:
            continue
        out.append(path)
    return out


def part_chains(tok, args) -> dict:
    chains = []
    if args.peps:
        paths = _peps_paths(args.peps, args.revisions + 1)[: args.chains]
        chains += [c for c in ms.chains_from_git(args.peps, paths, lang="en", last=args.revisions + 1, until=PEPS_HEAD)]
    if args.javaguide:
        paths = _zh_paths(args.javaguide, args.revisions + 1, args.chains)
        chains += [c for c in ms.chains_from_git(args.javaguide, paths, lang="zh", last=args.revisions + 1, since="2020-03-14")]
    chains = [c for c in chains if len(c.texts) == args.revisions + 1]
    log(f"chains: {len(chains)} ({sum(c.lang == 'en' for c in chains)} en, {sum(c.lang == 'zh' for c in chains)} zh), "
        f"{args.revisions} revisions each")
    chunker = make_chunker(DEFAULT, tok)
    base = StickyConfig.of(DEFAULT, RechunkConfig(mode="sticky", isolate_edits=False))
    configs = {}
    for iso in (False, True):
        cfg = replace(base, isolate_edits=iso)
        configs["isolated" if iso else "sticky"] = cfg
        # Drift control off: how far sticky departs from a fresh cut.
        configs["uncontrolled_isolated" if iso else "uncontrolled"] = replace(cfg, max_drift=float("inf"), max_out_of_bounds=1.0)
    if args.variant:
        # One more setting, e.g. "isolate_edits=1,max_drift=0.5": RechunkConfig fields over the default.
        upd = {k: (v == "1" if k == "isolate_edits" else float(v)) for k, v in (kv.split("=") for kv in args.variant.split(","))}
        configs["variant"] = StickyConfig.of(DEFAULT, RechunkConfig(mode="sticky", **upd))
    if args.chain_configs:
        configs = {k: v for k, v in configs.items() if k in args.chain_configs.split(",")}
    t0 = time.perf_counter()
    stateless = [ms.run_chain(c, chunker, tok, None) for c in chains]
    runs = {name: [ms.run_chain(c, chunker, tok, cfg) for c in chains] for name, cfg in configs.items()}
    log(f"  chunked in {time.perf_counter() - t0:.1f} s")
    per_step = {}
    for name, rs in (*runs.items(), ("stateless", stateless)):
        per_step[name] = {lang: [round(statistics.fmean(r.steps[k].rc for r in rs if r.lang == lang), 4)
                                 for k in range(1, args.revisions + 1)] for lang in sorted({r.lang for r in rs})}
    at = (1, 5, 10, 15, args.revisions)
    drift = {}
    for name, rs in runs.items():
        drift[name] = {"revisions": list(at), **{
            lang: [{"out_of_bounds": round(statistics.fmean(r.steps[k].drift.out_of_bounds for r in rs if r.lang == lang), 4),
                    "fresh_out_of_bounds": round(statistics.fmean(r.steps[k].drift.fresh_out_of_bounds for r in rs if r.lang == lang), 4),
                    "distance": round(statistics.fmean(r.steps[k].drift.distance for r in rs if r.lang == lang), 4),
                    "chunks": round(statistics.fmean(r.steps[k].chunks for r in rs if r.lang == lang), 2)}
                   for k in at]
            for lang in sorted({r.lang for r in rs})}}
    return {"chains": [{"id": c.chain_id, "first": c.commits[0], "last": c.commits[-1]} for c in chains],
            "config": {name: {"lo": c.lo, "hi": c.hi, "max_drift": c.max_drift, "max_out_of_bounds": c.max_out_of_bounds,
                              "isolate_edits": c.isolate_edits} for name, c in configs.items()},
            **{name: ms.chain_summary(rs, stateless) for name, rs in runs.items()},
            "rc_per_revision": per_step, "drift_at": drift,
            "stateless_chunks_at": {lang: [round(statistics.fmean(r.steps[k].chunks for r in stateless if r.lang == lang), 2) for k in at]
                                    for lang in sorted({r.lang for r in stateless})}}


def part_retrieval(tok, args) -> dict:
    from reindex.domain.config import PipelineConfig, SourceConfig
    from reindex.adapters.embedders import make_embedder
    from reindex.domain.identity import fingerprint, resolve_config, vector_id

    queries = [q for q in m.load_queries(CORPUS / "queries.jsonl") if q.lang == "en"]
    corpus = m.load_corpus(CORPUS / "snapshot_new.parquet")
    paths = sorted({q.doc_path for q in queries if q.doc_path in corpus})
    # --follow: most PEPs moved into peps/ in 2022; their history before the move counts too.
    chains = ms.chains_from_git(args.peps, paths, lang="en", last=args.revisions + 1, until=PEPS_HEAD, follow=True)
    chunker = make_chunker(DEFAULT, tok)
    rechunk = RechunkConfig(mode="sticky")
    if args.isolate_edits != "default":
        rechunk = rechunk.model_copy(update={"isolate_edits": args.isolate_edits == "on"})
    if args.max_drift is not None:
        rechunk = rechunk.model_copy(update={"max_drift": args.max_drift})
    cfg = StickyConfig.of(DEFAULT, rechunk)
    log(f"retrieval: sticky config {cfg}")
    finals: dict[str, tuple] = {}
    lengths = []
    for c in chains:
        if c.texts and c.texts[-1] == corpus[c.doc_key]:
            run = ms.run_chain(c, chunker, tok, cfg)
            finals[c.texts[-1]] = run.final
            lengths.append(len(c.texts) - 1)
    log(f"retrieval: {len(paths)} query documents, {len(finals)} with a chain ending at the snapshot "
        f"(revisions per chain: median {statistics.median(lengths) if lengths else 0}, min {min(lengths, default=0)})")
    resolved = resolve_config(PipelineConfig(index="bench", source=SourceConfig(uri=".")))
    vid = vector_id(resolved.vector)
    import torch

    torch.set_num_threads(2)
    embedder = make_embedder(resolved.vector, batch_size=64)
    cache = m.EmbeddingCache(args.cache, vid)
    out = {}
    for name, ch in (("fresh", chunker), ("sticky", ms.FixedChunks(finals, chunker))):
        t0 = time.perf_counter()
        res = m.evaluate_retrieval(ch, corpus, paths, queries, embed=lambda t: embedder.embed(t).vectors,
                                   dim=embedder.dimension, fingerprint=lambda t: fingerprint(vid, t), count=tok.count_batch,
                                   cache=cache, lang="en")
        out[name] = res.as_dict()
        log(f"  {name}: recall {res.evidence_recall:.3f}, nDCG@5 {res.ndcg_at_5:.3f}, chunks {res.chunks}, "
            f"embedded {res.embedded} in {time.perf_counter() - t0:.0f} s")
    return {"config": {"lo": cfg.lo, "hi": cfg.hi, "max_drift": cfg.max_drift, "max_out_of_bounds": cfg.max_out_of_bounds,
                       "isolate_edits": cfg.isolate_edits},
            "documents": len(paths), "with_chain": len(finals), "revisions_median": statistics.median(lengths) if lengths else 0,
            "queries": len(queries), **out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", default=str(CORPUS / "revisions.parquet"))
    ap.add_argument("--peps", default=None, help="git dir of python/peps")
    ap.add_argument("--javaguide", default=None, help="git dir of Snailclimb/JavaGuide")
    ap.add_argument("--parts", default="pairs,chains,retrieval")
    ap.add_argument("--revisions", type=int, default=20)
    ap.add_argument("--chains", type=int, default=12, help="chains per language at most")
    ap.add_argument("--cache", default=".reindex/embed-cache")
    ap.add_argument("--json", default=None)
    ap.add_argument("--variant", default=None, help="chains: one more sticky setting, e.g. isolate_edits=1,max_drift=0.5")
    ap.add_argument("--chain-configs", default=None, help="chains: run only these (sticky, isolated, uncontrolled, "
                    "uncontrolled_isolated, variant); the stateless default always runs")
    ap.add_argument("--max-drift", type=float, default=None, help="retrieval: text.rechunk.max_drift of the sticky chains")
    ap.add_argument("--isolate-edits", choices=("default", "on", "off"), default="default",
                    help="retrieval: text.rechunk.isolate_edits of the sticky chains (default: the config default)")
    args = ap.parse_args()
    tok = load_tokenizer("all-MiniLM-L6-v2")
    out: dict = {}
    t0 = time.process_time()
    for part in args.parts.split(","):
        out[part] = {"pairs": part_pairs, "chains": part_chains, "retrieval": part_retrieval}[part](tok, args)
        log(f"{part}: done, {time.process_time() - t0:.0f} CPU s so far")
    text = json.dumps(out, indent=2, ensure_ascii=False, default=float)
    print(text)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
