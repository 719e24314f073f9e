"""Classification of a change (its kind), the field-by-field explanation, and the approval policy."""

from __future__ import annotations

import json
from typing import Any

from reindex.domain.config import ENV_SUFFIX, PipelineConfig, redact
from reindex.domain.kinds import ChangeKind
from reindex.domain.identity import Identity
from reindex.planner._baseline import Baseline

__all__ = ["IN_PLACE_KINDS", "KINDS", "approval_counts", "approval_needed", "approval_of_plan", "classify", "explain_changes",
           "forecast_refusal", "queries_changed", "truncation_refusal"]

KINDS = tuple(ChangeKind)

# Kinds applied in place on the live population (no new collection, nothing to cut over).
IN_PLACE_KINDS = tuple(k for k in ChangeKind if k.in_place)

# Config paths a payload-only change is made of (payload_id's inputs): applied in place, no re-embedding.
PAYLOAD_PATHS = ("source.metadata_fields", "payload.")


def _flatten(prefix: str, value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(f"{prefix}.{k}" if prefix else k, v))
        return out
    return {prefix: value}


def _show(v: Any) -> str:
    if isinstance(v, str):
        return v if len(v) <= 40 else v[:20] + "…" + v[-8:]
    return json.dumps(v)


def explain_changes(old: PipelineConfig, new: PipelineConfig) -> list[dict[str, str]]:
    """One entry per changed field: path, old → new, and what it means for the index."""
    a = _flatten("", old.model_dump(mode="json"))
    b = _flatten("", new.model_dump(mode="json"))
    out = []
    for path in sorted(set(a) | set(b)):
        if a.get(path) == b.get(path):
            continue
        old_v, new_v = redact(path, a.get(path)), redact(path, b.get(path))
        if path.endswith(ENV_SUFFIX):  # the variable a secret is read from: in no id (rotating a key plans nothing)
            half, effect = "operational", "operational: no re-embedding"
        elif path == "vector.query_prefix":
            half, effect = "queries", ("queries only: recorded on the live population by apply, readers embed "
                                       "queries with it from then on; no re-embedding")
        elif path.startswith("text."):
            half, effect = "text", "text half: every document is recut"
        elif path.startswith("vector."):
            half, effect = "vector", "vector half: every vector is recomputed, nothing is reused"
        elif path.startswith(PAYLOAD_PATHS):
            half, effect = "payload", "payload: every point's payload is rewritten in place, no re-embedding"
        else:
            half, effect = "operational", "operational: no re-embedding"
        out.append(
            {
                "field": path,
                "old": _show(old_v),
                "new": _show(new_v),
                "half": half,
                "line": f"{path}: {_show(old_v)} → {_show(new_v)} ({effect})",
            }
        )
    return out


def queries_changed(old: PipelineConfig | None, new: PipelineConfig) -> bool:
    """Whether queries are embedded differently (``vector.query_prefix``, in no id) under the same vector half:
    an in-place change of the live population's record, which readers embed queries with (invariant 14)."""
    if old is None:
        return False
    return old.vector.for_queries().prefix != new.vector.for_queries().prefix


def classify(baseline: Baseline, new_identity: Identity, documents_changed: bool, *, payload_changed: bool = False,
             text_changed: bool | None = None) -> ChangeKind:
    """The change kind (see DESIGN.md), the one classifier: the planner calls it with its baseline, apply
    with the live population as the baseline (to re-derive the kind in force). ``payload_changed``: the
    payload id differs from the baseline's
    (``source.metadata_fields`` or the ``payload`` section). ``text_changed``: some document was added,
    removed, or edited so that its chunks differ (None: as ``documents_changed``); a change whose edited
    documents all keep their chunks (a metadata edit) is payload-only."""
    old = baseline.identity
    if old is None:
        return ChangeKind.INITIAL
    if old.vector_id != new_identity.vector_id:
        return ChangeKind.VECTOR
    if old.text_id != new_identity.text_id:
        return ChangeKind.TEXT
    text_changed = documents_changed if text_changed is None else text_changed
    if text_changed:
        return ChangeKind.DOCUMENT
    return ChangeKind.PAYLOAD if payload_changed or documents_changed else ChangeKind.NONE


def approval_needed(kind: str, cfg: PipelineConfig, tokens: int, usd: float, *, live_documents: int = 0,
                    removed: int = 0, readable: int | None = None, unreadable: int = 0) -> tuple[bool, list[str]]:
    """Policy: which plans need a recorded approval before apply. ``live_documents`` is the live
    population's document count, ``readable`` the documents the scan could read, ``unreadable`` the live
    documents it could not (kept, not removed). Apply re-derives this from the config in force."""
    pol = cfg.approval
    reasons = []
    if readable == 0:
        reasons.append("the source yielded no readable document (empty, unmounted or unreadable?)")
    elif readable is not None and live_documents and readable < pol.min_readable_share * live_documents:
        reasons.append(f"only {readable:,} documents could be read against {live_documents:,} live "
                       f"({readable / live_documents:.0%} < approval.min_readable_share {pol.min_readable_share:.0%})")
    if live_documents and removed > pol.max_removed_share * live_documents:
        reasons.append(f"removes {removed:,} of {live_documents:,} live documents "
                       f"({removed / live_documents:.0%} > approval.max_removed_share {pol.max_removed_share:.0%})")
    kind = ChangeKind.of(kind)
    if unreadable and kind.pipeline_scoped:
        # In place, an unreadable document simply keeps its live points; a new population would lack it.
        reasons.append(f"{unreadable:,} live documents could not be read and would be missing from the new population")
    if kind.pipeline_scoped and pol.pipeline_scoped:
        reasons.append(f"{kind} plans need approval (approval.pipeline_scoped)")
    if not kind.pipeline_scoped:
        if pol.max_tokens is not None and tokens > pol.max_tokens:
            reasons.append(f"{tokens:,} tokens to embed exceed approval.max_tokens ({pol.max_tokens:,})")
        if pol.max_usd is not None and usd > pol.max_usd:
            reasons.append(f"${usd:,.2f} exceeds approval.max_usd (${pol.max_usd:,.2f})")
    return bool(reasons), reasons


def approval_counts(live_documents: int, removed: int, readable: int, unreadable: int) -> dict[str, int]:
    """The keyword arguments of :func:`approval_needed` that describe the corpus against the live index."""
    return {"live_documents": live_documents, "removed": removed, "readable": readable, "unreadable": unreadable}


def forecast_refusal(body: dict, cfg: PipelineConfig, kind: str) -> str | None:
    """Why the approval policy refuses to carry out a plan on its forecast (``approval.require_forecast``,
    ``approval.min_forecast_delta``), or None. Only pipeline-scoped plans have a forecast."""
    pol = cfg.approval
    if not ChangeKind.of(kind).pipeline_scoped:
        return None
    f = body.get("forecast")
    if f is None:
        return ("it has no forecast and approval.require_forecast is set: run `reindex plan --forecast` (what the "
                "change buys, measured on a sample) and approve that plan") if pol.require_forecast else None
    if pol.min_forecast_delta is None:
        return None
    k = f.get("k", 10)
    metrics = f.get("metrics", {})
    name = next((m for m in (f"recall_at_{k}", "mrr", "passage_mrr") if m in metrics), None)
    if f.get("verdict") == "worse":
        return f"its forecast says the change is worse ({', '.join(f'{m} {v}' for m, v in _verdicts(metrics))})"
    if name is not None and metrics[name]["low"] < pol.min_forecast_delta:
        m = metrics[name]
        return (f"its forecast's lower bound of {name} new − old is {m['low']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}], "
                f"below approval.min_forecast_delta {pol.min_forecast_delta:+.3f}")
    return None


def truncation_refusal(body: dict, cfg: PipelineConfig) -> str | None:
    """Why ``approval.max_truncated_share`` refuses to carry out a plan, or None: more of the chunks it cut exceed the
    embedding model's input limit (counted in the model's own tokens) than the approver allows."""
    limit = cfg.approval.max_truncated_share
    o = body["work"].get("over_model_limit")
    if limit is None or not o or not o.get("of"):
        return None
    share = o["chunks"] / o["of"]
    if share <= limit:
        return None
    longest = ", ".join(f"{x['doc_id']}#{x['ordinal']} ({x['tokens']:,} tokens)" for x in (o.get("longest") or [])[:3])
    return (f"{o['chunks']:,} of {o['of']:,} chunks ({share:.1%}) exceed the model's input limit of {o['limit']:,} "
            f"tokens (counted with {o['tokenizer']}), above approval.max_truncated_share {limit:.1%}"
            + (f"; the longest: {longest}" if longest else "") + ": lower the chunk size and plan again")


def _verdicts(metrics: dict) -> list[tuple[str, str]]:
    return [(m, v["verdict"]) for m, v in metrics.items() if v.get("verdict")]


def approval_of_plan(body: dict, cfg: PipelineConfig, kind: str) -> tuple[bool, list[str]]:
    """The approval a plan needs under the config in force, from the plan's own work section (never from
    its ``approval`` field, which a plan file could claim anything in)."""
    w = body["work"]
    docs = w["documents"]
    tokens = int(w["tokens_to_embed"])
    usd = tokens / 1e6 * cfg.cost.usd_per_mtok
    readable = int(docs.get("added", 0)) + int(docs.get("edited", 0)) + int(docs.get("unchanged", 0))
    return approval_needed(kind, cfg, tokens, usd, **approval_counts(
        int(docs.get("live", 0)), len(w.get("removed_documents", ())), readable,
        len(w.get("unreadable_documents", ()))))
