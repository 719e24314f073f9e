"""Recompute fraction R_c of sticky (edit-aware) re-chunking, on revision pairs and on revision
chains, and retrieval quality of a chain's final sticky chunks against a fresh cut.

* **Pairs.** The old version is cut by the stateless chunker (what a population built from it
  holds); the new version is re-chunked in sticky mode against those chunks. R_c, the no-edit
  control (the old version re-chunked against its own chunks by fresh instances: must be 0), bands
  and paired differences come out in :class:`reindex.measure.MeasureReport`'s shapes, so
  ``reindex measure --json`` prints the same JSON whichever mode it measured.
* **Chains.** Successive revisions of one document (git history). Revision 0 is cut statelessly;
  every later revision is re-chunked against the previous revision's chunks. Per revision: R_c, the
  tokens embedded, re-cuts by drift control, and the drift from a fresh cut; compared with the
  stateless chunker on the same revisions and with re-embedding every edited document whole.
* **Retrieval.** The final revision's sticky chunks against a fresh cut of the same text, through
  :func:`reindex.measure.evaluate_retrieval` (evidence recall in a 2,048-token budget, nDCG@5).
"""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from reindex import measure as m
from reindex.adapters.chunkers import make_chunker
from reindex.adapters.chunkers.base import Chunk, Chunker
from reindex.adapters.chunkers.sticky import (
    Drift,
    StickyConfig,
    chunk_drift,
    rechunk_document,
    reuse_floor,
)
from reindex.domain.config import RechunkConfig, chunker_spec, parse_chunker_spec
from reindex.errors import ChunkerError, ReindexError
from reindex.adapters.tokenizers import Tokenizer

__all__ = [
    "Chain",
    "ChainRun",
    "ChainStep",
    "FixedChunks",
    "chain_summary",
    "chains_from_git",
    "floor_pair",
    "git_bytes",
    "measure_sticky",
    "run_chain",
    "sticky_pair",
    "sticky_spec",
]

STICKY = RechunkConfig(mode="sticky")


def sticky_spec(spec: str) -> str:
    """The name a sticky-mode chunker gets in reports: ``<chunker spec>+sticky``."""
    return f"{spec}+sticky"


def _texts(chunks: Sequence[Chunk]) -> list[str]:
    return [c.text for c in chunks]


# --------------------------------------------------------------------------------------------
# Pairs
# --------------------------------------------------------------------------------------------


def sticky_pair(
    chunker: Chunker, control: Chunker, tokenizer: Tokenizer, config: StickyConfig, pair: m.RevisionPair, count: m.Counter
) -> tuple[m.PairResult, bool]:
    """``(R_c of one pair in sticky mode, whether drift control re-cut the new version)``: old version
    cut statelessly, new version re-chunked against it; the no-edit control re-chunks the old version
    against its own chunks with ``control`` (a fresh instance)."""
    try:
        old = _texts(chunker.chunk(pair.old_text))
        done = rechunk_document(old, pair.new_text, chunker, tokenizer, config)
        new = _texts(done.chunks)
        again = _texts(rechunk_document(_texts(control.chunk(pair.old_text)), pair.old_text, control, tokenizer, config).chunks)
    except Exception as err:  # noqa: BLE001 - a chunker failing on a document is a result
        msg = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:200]
        return m.PairResult(pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction, float("nan"), 0, 0, 0, (), msg), False
    distinct = list(dict.fromkeys(new))
    by_text = dict(zip(distinct, count(distinct))) if distinct else {}
    old_set = set(old)
    missed = sum(c for t, c in by_text.items() if t not in old_set)
    total = sum(by_text.values())
    control_miss = [t for t in dict.fromkeys(again) if t not in old_set]
    no_edit_missed = sum(count(control_miss)) if control_miss else 0
    result = m.PairResult(
        pair.pair_id, pair.lang, pair.doc_key, pair.band, pair.edit_fraction, missed / total if total else 0.0,
        missed, total, no_edit_missed, tuple(by_text[t] for t in new),
    )
    return result, done.recut


def floor_pair(chunker: Chunker, tokenizer: Tokenizer, config: StickyConfig, pair: m.RevisionPair) -> float:
    """The reuse floor of one pair: R_c of :func:`reindex.adapters.chunkers.sticky.reuse_floor`'s partition
    of the new version against the old version's stateless chunks, i.e. the least R_c any
    re-chunking that keeps whole old chunks can reach (no lower size bound, no drift control)."""
    old = _texts(chunker.chunk(pair.old_text))
    return m.recompute_fraction(old, reuse_floor(old, pair.new_text, tokenizer, config.hi), tokenizer.count_batch)


def _sticky_report(spec: str, chunker_cfg: object, pairs: Sequence[m.RevisionPair], tokenizer: Tokenizer,
                   rechunk: RechunkConfig, langs: Sequence[str]) -> tuple[m.ChunkerReport, int, dict[str, float]]:
    t0 = time.perf_counter()
    try:
        config = StickyConfig.of(chunker_cfg, rechunk)
        chunker, control = make_chunker(chunker_cfg, tokenizer), make_chunker(chunker_cfg, tokenizer)
    except ReindexError:
        raise
    except Exception as err:  # noqa: BLE001
        raise ChunkerError(f"cannot build chunker {spec}: {err}".splitlines()[0]) from None
    done = [sticky_pair(chunker, control, tokenizer, config, p, tokenizer.count_batch) for p in pairs]
    results = tuple(r for r, _ in done)
    floors: dict[str, list[float]] = {}
    for p, r in zip(pairs, results):
        if r.error is None:
            floors.setdefault(p.lang, []).append(floor_pair(chunker, tokenizer, config, p))
    ok = [r for r in results if r.error is None]
    lengths = [n for r in ok for n in r.chunk_tokens]
    by_lang = {lang: float(statistics.median(ls)) if (ls := [n for r in ok if r.lang == lang for n in r.chunk_tokens]) else 0.0
               for lang in langs}
    ctrl_missed = sum(r.no_edit_missed for r in ok)
    ctrl_total = sum(r.new_tokens for r in ok) or 1
    report = m.ChunkerReport(
        sticky_spec(spec), results, ctrl_missed / ctrl_total if ctrl_missed else 0.0,
        float(statistics.median(lengths)) if lengths else 0.0, by_lang, sum(1 for r in results if r.error),
        tuple(m.band_stats(results, langs)), time.perf_counter() - t0,
    )
    recuts = sum(1 for r, recut in done if recut and r.error is None)
    return report, recuts, {lang: statistics.fmean(fs) for lang, fs in sorted(floors.items())}


def measure_sticky(
    chunkers: Sequence[object], pairs: Sequence[m.RevisionPair], tokenizer: Tokenizer, *, source: str,
    rechunk: RechunkConfig = STICKY, with_stateless: bool = False, seed: int = 0, target_median: float | None = None,
    calibration: dict | None = None, progress: Callable[[str], None] | None = None,
) -> m.MeasureReport:
    """R_c of every chunker (a config or spec string) in sticky mode on the same pairs, as a
    :class:`reindex.measure.MeasureReport` (chunker specs get ``+sticky``). ``with_stateless`` also
    measures each chunker statelessly (``reindex.measure.run_measure``'s way), so the paired
    differences include sticky vs stateless. Warnings name non-zero no-edit controls, failures,
    how many pairs drift control re-cut freshly and the reuse floor per language (mean R_c of
    :func:`floor_pair`)."""
    if not pairs:
        raise m.MeasureError(f"{source}: no revision pairs to measure (check --lang, --band and --limit)")
    if rechunk.mode != "sticky":
        rechunk = rechunk.model_copy(update={"mode": "sticky"})
    t0 = time.perf_counter()
    langs = tuple(sorted({p.lang for p in pairs}))
    count = tokenizer.count_batch
    reports: list[m.ChunkerReport] = []
    warnings: list[str] = []
    for item in chunkers:
        cfg = parse_chunker_spec(item) if isinstance(item, str) else item
        spec = chunker_spec(cfg)
        if with_stateless:
            rep = m.measure_chunker(m.Candidate(spec, lambda c=cfg: make_chunker(c, tokenizer)), pairs, count, langs)
            reports.append(rep)
        rep, recuts, floor = _sticky_report(spec, cfg, pairs, tokenizer, rechunk, langs)
        if calibration and spec in calibration.get("chunkers", {}):
            rep = replace(rep, calibrated=calibration["chunkers"][spec])
        reports.append(rep)
        warnings.append(f"{rep.spec}: drift control re-cut {recuts} of {len(pairs)} new versions freshly")
        if floor:
            warnings.append(f"{rep.spec}: reuse floor (the least mean R_c any re-chunking keeping whole old chunks can reach): "
                            + ", ".join(f"{lang} {100 * v:.1f} %" for lang, v in floor.items()))
        if progress:
            progress(f"{rep.spec}: {len(pairs)} pairs in {rep.seconds:.1f} s")
    paired = m.paired_differences([c.spec for c in reports], [c.results for c in reports], langs, seed=seed)
    warnings = m.length_warnings(reports) + warnings
    for c in reports:
        if c.no_edit_rc != 0:
            warnings.append(f"{c.spec}: the no-edit control gave R_c = {c.no_edit_rc:.4g}, not 0: the chunker is not deterministic")
        if c.failures:
            warnings.append(f"{c.spec}: failed on {c.failures} of {len(pairs)} pairs (excluded from its statistics)")
    return m.MeasureReport(source, tokenizer.name, len(pairs), langs, tuple(reports), tuple(paired), tuple(warnings),
                           target_median, calibration, None, seed, time.perf_counter() - t0)


# --------------------------------------------------------------------------------------------
# Chains
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Chain:
    """Successive revisions of one document, oldest first (consecutive texts always differ)."""

    chain_id: str
    lang: str
    doc_key: str
    texts: tuple[str, ...]
    commits: tuple[str, ...]


def git_bytes(git_dir: str | Path, *args: str) -> bytes:
    """stdout of ``git --git-dir=GIT_DIR ARGS…`` (a bare or normal repository); MeasureError when git fails."""
    try:
        done = subprocess.run(["git", f"--git-dir={git_dir}", *args], capture_output=True, check=False)
    except FileNotFoundError:
        raise m.MeasureError("git is not installed; chains from git need the git command") from None
    if done.returncode != 0:
        msg = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise m.MeasureError(f"git {' '.join(args[:2])} in {git_dir} failed: {msg[0] if msg else done.returncode}")
    return done.stdout


def chains_from_git(git_dir: str | Path, paths: Sequence[str], *, lang: str, last: int = 21, since: str | None = None,
                    until: str | None = None, follow: bool = False) -> list[Chain]:
    """One chain per path: the file's last ``last`` distinct texts along ``git log --no-merges``
    (oldest first; commits that leave the text unchanged or are not valid UTF-8 are skipped),
    optionally limited to commits after ``since`` and up to ``until`` (a commit); ``follow`` also
    walks the file's history across renames (``git log --follow``)."""
    out = []
    for path in paths:
        args = ["log", "--no-merges", "--format=%x00%H", "--name-only", *(["--follow"] if follow else []),
                *([f"--since={since}"] if since else []), *([until] if until else []), "--", path]
        texts: list[str] = []  # newest first while collecting
        used: list[str] = []
        for block in git_bytes(git_dir, *args).decode("utf-8", "surrogateescape").split("\x00")[1:]:
            lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
            if not lines:
                continue
            commit, at = lines[0], (lines[1] if len(lines) > 1 else path)
            try:
                text = git_bytes(git_dir, "show", f"{commit}:{at}").decode("utf-8")
            except (m.MeasureError, UnicodeDecodeError):
                continue
            if texts and text == texts[-1]:
                continue
            texts.append(text)
            used.append(commit)
            if len(texts) >= last:
                break
        out.append(Chain(f"{lang}:{path}", lang, path, tuple(texts[::-1]), tuple(used[::-1])))
    return out


@dataclass(frozen=True, slots=True)
class ChainStep:
    """One revision of a chain under one re-chunking mode."""

    missed_tokens: int  # tokens of distinct inputs not among the previous revision's inputs
    new_tokens: int  # tokens of all distinct inputs of this revision
    chunks: int
    recut: bool  # drift control cut this revision freshly
    drift: Drift | None  # drift of this revision's chunks from a fresh cut (None for stateless)

    @property
    def rc(self) -> float:
        return self.missed_tokens / self.new_tokens if self.new_tokens else 0.0


@dataclass(frozen=True, slots=True)
class ChainRun:
    """A chain chunked revision by revision: step 0 is the initial build, steps 1.. the revisions."""

    chain_id: str
    lang: str
    doc_key: str
    mode: str  # sticky | stateless
    spec: str
    steps: tuple[ChainStep, ...]
    final: tuple[Chunk, ...]  # chunks of the last revision

    @property
    def embedded_after_initial(self) -> int:
        return sum(s.missed_tokens for s in self.steps[1:])

    @property
    def whole_documents(self) -> int:
        """Tokens embedded by re-embedding every edited revision whole (all its distinct inputs)."""
        return sum(s.new_tokens for s in self.steps[1:])


def run_chain(chain: Chain, chunker: Chunker, tokenizer: Tokenizer, config: StickyConfig | None) -> ChainRun:
    """Chunk every revision of ``chain``: statelessly when ``config`` is None, else in sticky mode
    against the previous revision's chunks (revision 0 is cut statelessly either way). Each step's
    drift is measured against a fresh cut of the same revision."""
    steps: list[ChainStep] = []
    previous: list[str] = []
    chunks: tuple[Chunk, ...] = ()
    count = tokenizer.count_batch
    for k, text in enumerate(chain.texts):
        if config is None or k == 0:
            chunks, recut = tuple(chunker.chunk(text)), False
            drift = None
            if config is not None:
                drift = chunk_drift([c.tokens for c in chunks], [c.tokens for c in chunks], config.lo, config.hi)
        else:
            done = rechunk_document(previous, text, chunker, tokenizer, config)
            chunks, recut = done.chunks, done.recut
            lengths = [c.tokens for c in chunks]
            if done.drift is not None and not recut:
                drift = done.drift
            elif recut or done.kept == 0:  # the chunks are a fresh cut
                drift = chunk_drift(lengths, lengths, config.lo, config.hi)
            else:
                drift = chunk_drift(lengths, [c.tokens for c in chunker.chunk(text)], config.lo, config.hi)
        texts = _texts(chunks)
        missed, total = m.recompute(previous if k else [], texts, count)
        steps.append(ChainStep(missed, total, len(chunks), recut, drift))
        previous = texts
    spec = chunker.spec
    return ChainRun(chain.chain_id, chain.lang, chain.doc_key, "stateless" if config is None else "sticky",
                    sticky_spec(spec) if config is not None else spec, tuple(steps), chunks)


def chain_summary(sticky: Sequence[ChainRun], stateless: Sequence[ChainRun], *, seed: int = 0) -> dict:
    """Per language (and all): revisions, mean R_c per revision (sticky, stateless, with a paired
    bootstrap interval of the difference over chains), cumulative tokens embedded after the initial
    build (sticky, stateless, whole edited documents), the mean per-chain ratio sticky / stateless
    with a bootstrap interval, re-cuts, and the drift of the final revision (mean out-of-bounds
    share, sticky and fresh, and mean W1 / median)."""
    out: dict[str, dict] = {}
    langs = sorted({r.lang for r in sticky})
    for lang in [*langs, *(["all"] if len(langs) > 1 else [])]:
        pairs = [(a, b) for a, b in zip(sticky, stateless) if lang == "all" or a.lang == lang]
        if not pairs:
            continue
        keys = [a.chain_id for a, _ in pairs]
        rc_s = [statistics.fmean(s.rc for s in a.steps[1:]) for a, _ in pairs]
        rc_f = [statistics.fmean(s.rc for s in b.steps[1:]) for _, b in pairs]
        diff = m.bootstrap_mean([100 * (x - y) for x, y in zip(rc_s, rc_f)], keys, seed=seed)
        ratio = m.bootstrap_mean([a.embedded_after_initial / max(1, b.embedded_after_initial) for a, b in pairs], keys, seed=seed)
        finals = [a.steps[-1].drift for a, _ in pairs if a.steps[-1].drift is not None]
        out[lang] = {
            "chains": len(pairs),
            "revisions": sum(len(a.steps) - 1 for a, _ in pairs),
            "rc_mean_sticky": round(statistics.fmean(rc_s), 6),
            "rc_mean_stateless": round(statistics.fmean(rc_f), 6),
            "rc_diff_points": [round(x, 3) for x in diff],
            "tokens_sticky": sum(a.embedded_after_initial for a, _ in pairs),
            "tokens_stateless": sum(b.embedded_after_initial for _, b in pairs),
            "tokens_whole_documents": sum(b.whole_documents for _, b in pairs),
            "initial_tokens": sum(b.steps[0].new_tokens for _, b in pairs),
            "ratio_sticky_stateless": [round(x, 4) for x in ratio],
            "recuts": sum(s.recut for a, _ in pairs for s in a.steps),
            "final_out_of_bounds": round(float(np.mean([d.out_of_bounds for d in finals])), 4) if finals else None,
            "final_fresh_out_of_bounds": round(float(np.mean([d.fresh_out_of_bounds for d in finals])), 4) if finals else None,
            "final_distance": round(float(np.mean([d.distance for d in finals])), 4) if finals else None,
        }
    return out


# --------------------------------------------------------------------------------------------
# Retrieval on a chain's final revision
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FixedChunks:
    """A chunker that returns given chunks for given texts (a chain's final sticky chunks) and cuts
    any other text with ``fallback``; lets :func:`reindex.measure.evaluate_retrieval` score them."""

    by_text: dict[str, tuple[Chunk, ...]]
    fallback: Chunker

    @property
    def spec(self) -> str:
        return sticky_spec(self.fallback.spec)

    def chunk(self, text: str) -> list[Chunk]:
        got = self.by_text.get(text)
        return list(got) if got is not None else self.fallback.chunk(text)
