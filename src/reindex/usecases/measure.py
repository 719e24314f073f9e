"""Measure the recompute fraction of chunkers on revision pairs (and retrieval)."""

from __future__ import annotations

import statistics
from pathlib import Path

from reindex.domain.config import (
    PipelineConfig,
    SourceConfig,
    chunker_spec,
    load_config,
    parse_chunker_spec,
)
from reindex.errors import ConfigError
from reindex.domain.config import VectorHalf
from reindex.domain.identity import fingerprint, resolve_config, vector_id
from reindex.domain.models import STATIC_DISTILL_DIMS
from reindex.context import backends

__all__ = ["COMPOSE_MODELS", "measure", "measure_chains", "measure_units"]

COMPOSE_MODELS = ("static", "minilm")


def measure(
    *,
    pairs: str | Path | None = None,
    chunkers: tuple[str, ...] | list[str] = (),
    config_path: str | Path | None = None,
    from_git: str | Path | None = None,
    paths: str | None = None,
    lang: str | None = None,
    bands: tuple[str, ...] | list[str] = (),
    limit: int | None = None,
    calibrate: bool = False,
    target_median: float = 250,
    queries: str | Path | None = None,
    corpus: tuple[str, ...] | list[str] = (),
    cache: str | Path | None = ".reindex/embed-cache",
    pool: int | None = None,
    seed: int = 0,
    report_dir: str | Path | None = None,
    rechunk: str = "stateless",
    progress=None,
):
    """Measure R_c of chunkers over revision pairs (a file, or built from git history), with the
    no-edit control, bands, paired differences, optional length calibration and optional retrieval
    quality on the same chunkings. Returns (MeasureReport, report paths or None)."""
    from reindex import measure as m
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.tokenizers import load_tokenizer

    if (pairs is None) == (from_git is None):
        raise ConfigError("give exactly one of --pairs FILE or --from-git REPO")
    if from_git is not None and not paths:
        raise ConfigError("--from-git needs --paths GLOB (e.g. --paths 'docs/**/*.md')")
    if paths and from_git is None:
        raise ConfigError("--paths only applies with --from-git")
    if (queries is None) != (not corpus):
        raise ConfigError("--queries and --corpus go together: give the queries file and the snapshot they refer to")
    if target_median <= 0:
        raise ConfigError("--target-median must be positive")
    if rechunk not in ("stateless", "sticky"):
        raise ConfigError(f"--rechunk {rechunk!r}: expected stateless or sticky")
    if rechunk == "sticky" and queries is not None:
        raise ConfigError("--rechunk sticky measures R_c on pairs; retrieval of sticky chunkings needs revision "
                          "chains (bench/sticky.py), not --queries")
    cfg = load_config(config_path) if config_path is not None else PipelineConfig(index="measure", source=SourceConfig(uri="."))
    specs = [parse_chunker_spec(s) for s in (chunkers or m.DEFAULT_CHUNKERS)]
    if calibrate:
        for s in specs:
            m.scale_chunker(s, m.size_of(s) if s.kind != "sentence" else 1)  # fails before any work
    tok = load_tokenizer(cfg.text.tokenizer)
    count = tok.count_batch
    if pairs is not None:
        all_pairs = m.load_pairs(pairs)
        source = str(pairs)
    else:
        all_pairs = m.pairs_from_git(from_git, paths or "", lang=lang or "en")
        source = f"git {from_git} -- {paths}"
    selected = m.select_pairs(all_pairs, lang=lang, bands=bands, limit=None)
    calibration = None
    if calibrate:
        specs, selected, calibration = _calibrated(specs, selected, tok, target_median)
    if limit is not None:
        selected = selected[:limit]
    if rechunk == "sticky":
        from reindex.measure.sticky import measure_sticky

        report = measure_sticky(specs, selected, tok, source=source, seed=seed,
                                target_median=target_median if calibrate else None, calibration=calibration,
                                progress=progress)
    else:
        cands = [m.Candidate(chunker_spec(s), lambda s=s: make_chunker(s, tok)) for s in specs]
        report = m.run_measure(cands, selected, count, tokenizer=cfg.text.tokenizer, source=source, seed=seed,
                               target_median=target_median if calibrate else None, calibration=calibration,
                               progress=progress)
    if queries is not None:
        report = _measure_retrieval(report, specs, cfg, tok, queries, corpus, cache, pool, seed, lang, progress)
    paths_out = m.write_measure_reports(report, report_dir) if report_dir is not None else None
    return report, paths_out


def _calibrated(specs: list, selected: list, tok, target_median: float) -> tuple[list, list, dict]:
    """Tune each chunker's size on a held-out 10 % of the documents to ``target_median`` tokens; returns the
    tuned specs, the pairs left to measure and the calibration record."""
    from reindex import measure as m
    from reindex.adapters.chunkers import make_chunker

    held, selected = m.calibration_split(selected)
    texts = list(dict.fromkeys(p.old_text for p in held))
    if not texts:
        raise ConfigError("--calibrate: the held-out 10 % of documents is empty; give more pairs")
    info = {}
    tuned = []
    for s in specs:
        size, med = m.calibrate_size(lambda v, s=s: make_chunker(m.scale_chunker(s, v), tok), texts, tok.count_batch,
                                     target=target_median)
        new = m.scale_chunker(s, size)
        info[chunker_spec(new)] = {"from": chunker_spec(s), "value": size, "median": med,
                                   "within_tolerance": abs(med - target_median) <= m.LENGTH_TOLERANCE * target_median}
        tuned.append(new)
    calibration = {"target": target_median, "pairs": len(held), "documents": len({p.doc_key for p in held}),
                   "chunkers": info}
    return tuned, selected, calibration


def _query_groups(corpus, qs, pool, seed):
    """Per corpus file holding some of the queries: its documents, those queries, their language, the retrieval
    pool drawn for them and the group's line of the report."""
    from reindex import measure as m

    for path in corpus:
        docs = m.load_corpus(path)
        mine = [q for q in qs if q.doc_path in docs]
        if not mine:
            continue
        q_lang = statistics.mode(q.lang for q in mine)
        pool_paths = m.retrieval_pool(docs, mine, pool, seed)
        yield docs, mine, q_lang, pool_paths, {"corpus": str(path), "lang": q_lang, "queries": len(mine),
                                               "pool_docs": len(pool_paths), "corpus_docs": len(docs)}


def _measure_retrieval(report, specs, cfg, tok, queries, corpus, cache, pool, seed, lang, progress):
    from reindex import measure as m
    from reindex.adapters.chunkers import make_chunker
    from reindex.domain.identity import fingerprint

    qs = m.load_queries(queries)
    if lang is not None:
        qs = [q for q in qs if q.lang == lang]
    resolved = resolve_config(cfg, backends.model_files)
    vid = vector_id(resolved.vector)
    embedder = backends.make_embedder(resolved.vector, batch_size=cfg.apply.embed_batch_size)
    store = m.EmbeddingCache(cache, vid) if cache is not None else None
    english_only = resolved.vector.model == "all-MiniLM-L6-v2"
    per_chunker: list[list] = [[] for _ in specs]
    groups = []
    for docs, mine, q_lang, pool_paths, group in _query_groups(corpus, qs, pool, seed):
        note = "English-only model: Chinese retrieval is indicative only" if english_only and q_lang != "en" else ""
        groups.append(group)
        for i, s in enumerate(specs):
            res = m.evaluate_retrieval(
                make_chunker(s, tok), docs, pool_paths, mine, embed=lambda t: embedder.embed(t).vectors,
                dim=embedder.dimension, fingerprint=lambda t: fingerprint(vid, t), count=tok.count_batch, cache=store,
                lang=q_lang, note=note,
            )
            per_chunker[i].append(res)
            if progress:
                progress(f"retrieval {q_lang} {chunker_spec(s)}: recall {res.evidence_recall:.3f}, embedded {res.embedded}")
    if not groups:
        raise ConfigError(f"{queries}: no query refers to a document of the given --corpus file(s)")
    info = {
        "model": resolved.vector.model,
        "budget_tokens": m.PACK_BUDGET,
        "candidates": m.PACK_CANDIDATES,
        "corpora": groups,
        "description": (
            f"Every pool document chunked by each chunker, embedded with {resolved.vector.model} (cached by fingerprint), "
            f"all chunks ranked by exact dot product; whole chunks packed first-fit into {m.PACK_BUDGET} tokens from the "
            f"top {m.PACK_CANDIDATES}; evidence recall = the evidence string lies inside the packed text of its document. "
            "Hit@5, MRR, nDCG@5 at document level (binary relevance). Pools: "
            + "; ".join(f"{g['lang']}: {g['pool_docs']} of {g['corpus_docs']} documents ({g['queries']} queries)" for g in groups)
        ),
    }
    return m.with_retrieval(report, per_chunker, info)


def measure_units(
    *,
    pairs: str | Path | None = None,
    unit: str = "sentence",
    chunkers: tuple[str, ...] | list[str] = (),
    config_path: str | Path | None = None,
    from_git: str | Path | None = None,
    paths: str | None = None,
    lang: str | None = None,
    bands: tuple[str, ...] | list[str] = (),
    limit: int | None = None,
    queries: str | Path | None = None,
    corpus: tuple[str, ...] | list[str] = (),
    models: tuple[str, ...] | list[str] = COMPOSE_MODELS,
    cache: str | Path | None = ".reindex/embed-cache",
    pool: int | None = None,
    seed: int = 0,
    progress=None,
) -> dict:
    """``reindex measure --unit``: chunk-level R_c beside unit-level R_c (units: the sentences inside each chunk)
    per chunker, and with ``queries`` the quality of composed against whole-chunk vectors per model
    (``static``: the model2vec model distilled from the config's model, exact; ``minilm``: the config's
    sentence-transformers model, approximate). See :mod:`reindex.measure.units`."""
    from reindex import measure as m
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.chunkers.units import parse_unit_spec, unit_texts
    from reindex.adapters.tokenizers import load_tokenizer
    from reindex.measure import units as mu

    if (pairs is None) == (from_git is None):
        raise ConfigError("give exactly one of --pairs FILE or --from-git REPO")
    if from_git is not None and not paths:
        raise ConfigError("--from-git needs --paths GLOB (e.g. --paths 'docs/**/*.md')")
    if (queries is None) != (not corpus):
        raise ConfigError("--queries and --corpus go together: give the queries file and the snapshot they refer to")
    bad = [x for x in models if x not in COMPOSE_MODELS]
    if bad:
        raise ConfigError(f"--model {bad[0]!r}: expected one of {', '.join(COMPOSE_MODELS)}")
    spec = parse_unit_spec(unit)
    cfg = load_config(config_path) if config_path is not None else PipelineConfig(index="measure", source=SourceConfig(uri="."))
    specs = [parse_chunker_spec(s) for s in (chunkers or m.DEFAULT_CHUNKERS)]
    tok = load_tokenizer(cfg.text.tokenizer)
    if pairs is not None:
        all_pairs, source = m.load_pairs(pairs), str(pairs)
    else:
        all_pairs, source = m.pairs_from_git(from_git, paths or "", lang=lang or "en"), f"git {from_git} -- {paths}"
    selected = m.select_pairs(all_pairs, lang=lang, bands=bands, limit=limit)
    split = lambda text: unit_texts(text, tok, spec)  # noqa: E731
    cands = [m.Candidate(chunker_spec(s), lambda s=s: make_chunker(s, tok)) for s in specs]
    report = mu.run_units(cands, selected, tok.count_batch, split, unit=str(spec), tokenizer=cfg.text.tokenizer,
                          source=source, seed=seed, progress=progress)
    if queries is None:
        return report
    qs = m.load_queries(queries)
    if lang is not None:
        qs = [q for q in qs if q.lang == lang]
    composers = [_composer(name, cfg, tok, cache) for name in models]
    groups = []
    for docs, mine, q_lang, pool_paths, group in _query_groups(corpus, qs, pool, seed):
        groups.append(group)
        for entry, s in zip(report["chunkers"], specs):
            for comp in composers:
                res = mu.composition_quality(make_chunker(s, tok), docs, pool_paths, mine, comp, split, tok.count_batch,
                                             seed=seed)
                res["lang"] = q_lang
                entry["quality"].setdefault(comp.name, []).append(res)
                if progress:
                    progress(f"quality {q_lang} {entry['spec']} {comp.name}: {res['verdict']} ({res['seconds']} s)")
    if not groups:
        raise ConfigError(f"{queries}: no query refers to a document of the given --corpus file(s)")
    report["quality_setup"] = {
        "k": mu.GATE_K, "corpora": groups,
        "description": "whole-chunk vectors (old side) against composed vectors (new side) on the same chunks and "
                       "queries, every chunk ranked by exact dot product; the cutover's paired gate (new - old per "
                       "query, 95 % bootstrap intervals over queries). Both models are English-only: Chinese "
                       "results are indicative only."}
    return report


def _composer(name: str, cfg, tok, cache):
    """The model a ``--unit`` quality run composes with: ``static`` (model2vec distilled from the config's model)
    or ``minilm`` (the config's model)."""
    from reindex import measure as m
    from reindex.measure import units as mu

    if name == "static":
        from reindex.adapters.embedders.static import StaticEmbedder, model_files as static_files

        base = VectorHalf(provider="model2vec", model=cfg.vector.model, dimension=STATIC_DISTILL_DIMS)
        vector = resolve_config(cfg.model_copy(update={"vector": base}), static_files).vector
        return mu.StaticCompose("static", StaticEmbedder(vector, exact=False), StaticEmbedder(vector, exact=True))
    resolved = resolve_config(cfg, backends.model_files)
    vid = vector_id(resolved.vector)
    embedder = backends.make_embedder(resolved.vector, batch_size=cfg.apply.embed_batch_size)
    store = m.EmbeddingCache(cache, vid) if cache is not None else None
    return mu.TransformerCompose("minilm", embedder, tok.count_batch, fingerprint=lambda t: fingerprint(vid, t),
                                 cache=store)


def measure_chains(
    *,
    from_git: str | Path,
    paths: str,
    chunkers: tuple[str, ...] | list[str] = (),
    config_path: str | Path | None = None,
    lang: str | None = None,
    revisions: int = 20,
    limit: int = 12,
    seed: int = 0,
    progress=None,
) -> dict:
    """Sticky against stateless re-chunking over revision chains from git history (``reindex measure
    --from-git REPO --paths GLOB --rechunk sticky --chains N``): the files matching ``paths`` with the
    most non-merge commits, each its last ``revisions + 1`` distinct texts (files with fewer are
    skipped), at most ``limit`` files. Revision 0 is cut statelessly; each later one is re-chunked
    against the previous revision's chunks (sticky, the config's ``text.rechunk`` thresholds) or cut
    afresh (stateless). Per chunker: R_c per revision, cumulative tokens embedded after the initial build
    (sticky, stateless, and re-embedding every edited revision whole), re-cuts and drift, with paired
    bootstrap intervals over chains (``measure_sticky.chain_summary``)."""
    from collections import Counter

    from reindex import measure as m
    from reindex.adapters.chunkers import make_chunker
    from reindex.adapters.chunkers.sticky import StickyConfig
    from reindex.measure.sticky import chain_summary, chains_from_git, git_bytes, run_chain
    from reindex.adapters.tokenizers import load_tokenizer

    if revisions < 1:
        raise ConfigError("--chains must be at least 1 (revisions after the first text of each file)")
    if limit < 1:
        raise ConfigError("--limit must be at least 1 (files to follow)")
    repo = Path(from_git)
    if not repo.is_dir():
        raise ConfigError(f"{repo}: not a folder (give a git repository for --from-git)")
    git_dir = repo / ".git" if (repo / ".git").is_dir() else repo
    cfg = load_config(config_path) if config_path is not None else PipelineConfig(index="measure", source=SourceConfig(uri="."))
    specs = [parse_chunker_spec(s) for s in (chunkers or [chunker_spec(cfg.text.chunker)])]
    rechunk = cfg.text.rechunk.model_copy(update={"mode": "sticky"})
    sticky_cfgs = [StickyConfig.of(s, rechunk) for s in specs]  # refuses chunkers without size bounds, before any work
    tok = load_tokenizer(cfg.text.tokenizer)
    log = git_bytes(git_dir, "log", "--no-merges", "--format=", "--name-only", "--", f":(glob){paths}")
    commits = Counter(line.strip() for line in log.decode("utf-8", "surrogateescape").splitlines() if line.strip())
    chains = []
    for path, n in sorted(commits.items(), key=lambda kv: (-kv[1], kv[0])):
        if n < revisions + 1 or len(chains) >= limit:
            break
        chain = chains_from_git(git_dir, [path], lang=lang or "en", last=revisions + 1)[0]
        if len(chain.texts) >= revisions + 1:
            chains.append(chain)
            if progress:
                progress(f"chain {len(chains)}/{limit}: {path} ({len(chain.texts) - 1} revisions)")
    if not chains:
        raise m.MeasureError(f"git {repo} -- {paths}: no file has {revisions + 1} distinct texts in its non-merge history; "
                             "lower --chains or widen --paths")
    out = []
    for spec, sc in zip(specs, sticky_cfgs, strict=True):
        chunker = make_chunker(spec, tok)
        sticky = [run_chain(c, chunker, tok, sc) for c in chains]
        stateless = [run_chain(c, chunker, tok, None) for c in chains]
        out.append({
            "spec": chunker_spec(spec),
            "bounds": {"lo": sc.lo, "hi": sc.hi, "max_drift": sc.max_drift, "max_out_of_bounds": sc.max_out_of_bounds},
            "summary": chain_summary(sticky, stateless, seed=seed),
            "per_chain": [
                {"chain": a.chain_id, "revisions": len(a.steps) - 1, "tokens_sticky": a.embedded_after_initial,
                 "tokens_stateless": b.embedded_after_initial, "tokens_whole_documents": b.whole_documents,
                 "rc_sticky": [round(s.rc, 6) for s in a.steps[1:]], "rc_stateless": [round(s.rc, 6) for s in b.steps[1:]],
                 "recuts": sum(s.recut for s in a.steps)}
                for a, b in zip(sticky, stateless, strict=True)
            ],
        })
        if progress:
            progress(f"{chunker_spec(spec)}: {len(chains)} chains measured")
    return {"source": f"git {repo} -- {paths}", "tokenizer": cfg.text.tokenizer, "revisions": revisions, "seed": seed,
            "chains": [{"chain": c.chain_id, "lang": c.lang, "commits": list(c.commits)} for c in chains],
            "chunkers": out}
