"""CI mode: classify a config change on a fixture and project it corpus-wide.

The kind comes from the planner (:func:`reindex.planner.classify`, through a plan of the head config against
the base config, both over the fixture): ``reindex classify`` and ``reindex plan`` cannot disagree. The CI
outcome is seed 001's mechanical reading of that plan's numbers: the chunk count changed → ``structural``
(exit 3); the fingerprint set changed without the count → ``text-affecting`` (2); a payload-only change →
``payload-only`` (exit 0: no chunk and no vector changes, the points' payloads are rewritten in place, no
embedding; safe to merge, and the report says what is rewritten); nothing → ``safe`` (0)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reindex.domain.config import chunker_spec
from reindex.domain.kinds import ChangeKind
from reindex.errors import ConfigError
from reindex.usecases.configure import load_resolved
from reindex.planner import PlanRequest, explicit_baseline, plan_change
from reindex.context import Context
from reindex.usecases.plan import estimate, rates_for

__all__ = ["Classification", "classify_change"]


@dataclass(frozen=True, slots=True)
class Classification:
    """CI mode: the seed's mechanical rule on a fixture, plus projected corpus-wide numbers."""

    outcome: str  # safe | payload-only | text-affecting | structural
    kind: str  # the plan kind the change would be
    fixture_documents: int
    chunks_base: int
    chunks_head: int
    tokens_base: int
    tokens_head: int
    fingerprints_changed: int  # head fingerprints not in base
    projection: dict | None
    explanation: tuple[str, ...]

    EXIT_CODES = {"safe": 0, "payload-only": 0, "text-affecting": 2, "structural": 3}

    @property
    def exit_code(self) -> int:
        return self.EXIT_CODES[self.outcome]

    def as_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "kind": self.kind,
            "exit_code": self.exit_code,
            "fixture_documents": self.fixture_documents,
            "chunks_base": self.chunks_base,
            "chunks_head": self.chunks_head,
            "tokens_base": self.tokens_base,
            "tokens_head": self.tokens_head,
            "fingerprints_changed": self.fingerprints_changed,
            "projection": self.projection,
            "explanation": list(self.explanation),
        }


def classify_change(
    fixture: str, base: str | Path, head: str | Path, *, scale_to: int | None = None, histogram: str | Path | None = None,
) -> Classification:
    """Plan ``head`` against ``base``, both over ``fixture``; the CI outcome of the plan's kind and numbers
    (see the module docstring), with a corpus-wide projection."""
    from reindex.planner import explain_changes

    if scale_to is not None and histogram is not None:
        raise ConfigError("--scale-to and --histogram are alternatives; give one")
    b_cfg, h_cfg = load_resolved(base), load_resolved(head)
    on_fixture = h_cfg.model_copy(update={"source": h_cfg.source.model_copy(update={"uri": str(fixture)})})
    baseline = explicit_baseline(b_cfg, str(fixture))
    plan = plan_change(PlanRequest(on_fixture, str(head), baseline, rates_for(Context(on_fixture))))
    n = plan.numbers
    kind = plan.kind
    bc, hc = n.chunks_old, n.chunks_new
    bt = sum(sum(state.tokens) for state in baseline.docs.values())
    ht = n.tokens_new
    changed = hc - n.chunks_reused  # head chunks whose fingerprint the base did not have (same document)
    bd = n.documents.total
    if kind is ChangeKind.PAYLOAD:
        outcome = "payload-only"
    elif bc != hc:
        outcome = "structural"
    elif changed or kind.pipeline_scoped:
        outcome = "text-affecting"
    else:
        outcome = "safe"
    projection = None
    if scale_to is not None:
        f = scale_to / bd if bd else 0.0
        projection = {
            "method": f"linear scale-up of the fixture ({bd} documents) to {scale_to:,} documents",
            "documents": scale_to,
            "chunks_base": round(bc * f),
            "chunks_head": round(hc * f),
            "change_pct": round((hc - bc) / bc * 100, 1) if bc else None,
            # Upper bound: a scale-up cannot tell which texts survive, so every head token counts.
            "tokens_to_embed_max": round((ht if outcome in ("structural", "text-affecting") else 0) * f),
        }
    elif histogram is not None:
        est = estimate(histogram, chunker_spec(b_cfg.text.chunker), chunker_spec(h_cfg.text.chunker),
                       usd_per_mtok=h_cfg.cost.usd_per_mtok or 0.02,
                       tokens_per_minute=h_cfg.cost.tokens_per_minute or 3.5e6, dimension=h_cfg.vector.dimension)
        projection = {
            "method": "window arithmetic over the histogram (seed 001)",
            "documents": est.documents,
            "chunks_base": est.chunks_old,
            "chunks_head": est.chunks_new,
            "change_pct": round((est.chunks_new - est.chunks_old) / est.chunks_old * 100, 1) if est.chunks_old else None,
            "tokens_to_embed": est.tokens_to_embed if outcome in ("structural", "text-affecting") else 0,
            "usd": round(est.usd, 2),
            "hours": round(est.hours, 2),
            "peak_vectors": est.peak_vectors,
        }
    lines = tuple(e["line"] for e in explain_changes(b_cfg, h_cfg))
    return Classification(outcome, kind, bd, bc, hc, bt, ht, changed, projection, lines)
