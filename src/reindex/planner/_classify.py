"""Classification of a change (its kind), the field-by-field explanation, and the approval policy."""

from __future__ import annotations

import json
from typing import Any

from reindex.config import PipelineConfig
from reindex.identity import Identity
from reindex.planner._baseline import Baseline

__all__ = ["KINDS", "approval_needed", "classify", "explain_changes"]

KINDS = ("none", "initial", "document-scoped", "pipeline-scoped/text", "pipeline-scoped/vector")


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
        if path.startswith("text."):
            half, effect = "text", "text half: every document is recut"
        elif path.startswith("vector."):
            half, effect = "vector", "vector half: every vector is recomputed, nothing is reused"
        else:
            half, effect = "operational", "operational: no re-embedding"
        out.append(
            {
                "field": path,
                "old": _show(a.get(path)),
                "new": _show(b.get(path)),
                "half": half,
                "line": f"{path}: {_show(a.get(path))} → {_show(b.get(path))} ({effect})",
            }
        )
    return out


def classify(baseline: Baseline, new_identity: Identity, documents_changed: bool) -> str:
    """The change kind (see DESIGN.md)."""
    if baseline.config is None:
        return "initial"
    old = baseline.identity
    assert old is not None
    if old.vector_id != new_identity.vector_id:
        return "pipeline-scoped/vector"
    if old.text_id != new_identity.text_id:
        return "pipeline-scoped/text"
    return "document-scoped" if documents_changed else "none"


def approval_needed(kind: str, cfg: PipelineConfig, tokens: int, usd: float) -> tuple[bool, list[str]]:
    """Policy: which plans need a recorded approval before apply."""
    pol = cfg.approval
    reasons = []
    if kind.startswith("pipeline-scoped") and pol.pipeline_scoped:
        reasons.append(f"{kind} plans need approval (approval.pipeline_scoped)")
    if kind in ("document-scoped", "initial"):
        if pol.max_tokens is not None and tokens > pol.max_tokens:
            reasons.append(f"{tokens:,} tokens to embed exceed approval.max_tokens ({pol.max_tokens:,})")
        if pol.max_usd is not None and usd > pol.max_usd:
            reasons.append(f"${usd:,.2f} exceeds approval.max_usd (${pol.max_usd:,.2f})")
    return bool(reasons), reasons
