"""CI mode: classify a config change on a fixture and project it corpus-wide."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reindex.config import (
    chunker_spec,
)
from reindex.domain import ChangeKind
from reindex.errors import ConfigError
from reindex.identity import identity_of
from reindex.pipeline import TextPipeline
from reindex.sources.base import ScanReport




from reindex.usecases.chunk import documents_of
from reindex.usecases.configure import load_resolved
from reindex.usecases.plan import estimate


@dataclass(frozen=True, slots=True)
class Classification:
    """CI mode: the seed's mechanical rule on a fixture, plus projected corpus-wide numbers."""

    outcome: str  # safe | text-affecting | structural
    kind: str  # the plan kind the change would be
    fixture_documents: int
    chunks_base: int
    chunks_head: int
    tokens_base: int
    tokens_head: int
    fingerprints_changed: int  # head fingerprints not in base
    projection: dict | None
    explanation: tuple[str, ...]

    EXIT_CODES = {"safe": 0, "text-affecting": 2, "structural": 3}

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
    """Chunk a fixture with both configs: fingerprint set changed without the chunk count changing =
    text-affecting; count changed = structural; neither = safe (seed 001)."""
    from reindex.planner import explain_changes

    if scale_to is not None and histogram is not None:
        raise ConfigError("--scale-to and --histogram are alternatives; give one")
    b_cfg, h_cfg = load_resolved(base), load_resolved(head)
    sides = []
    for cfg in (b_cfg, h_cfg):
        pipe = TextPipeline(cfg.text, identity_of(cfg).vector_id)
        fps: set[str] = set()
        chunks = tokens = docs = 0
        for doc in documents_of(fixture, cfg, ScanReport()):
            docs += 1
            for r in pipe.chunk_document(doc):
                fps.add(r.fingerprint)
                chunks += 1
                tokens += r.tokens
        sides.append((fps, chunks, tokens, docs))
    (bf, bc, bt, bd), (hf, hc, ht, _) = sides
    outcome = "structural" if bc != hc else ("text-affecting" if bf != hf else "safe")
    b_id, h_id = identity_of(b_cfg), identity_of(h_cfg)
    if b_id.vector_id != h_id.vector_id:
        kind = ChangeKind.VECTOR
    elif b_id.text_id != h_id.text_id:
        kind = ChangeKind.TEXT
    else:
        kind = ChangeKind.NONE
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
            "tokens_to_embed_max": round((ht if outcome != "safe" else 0) * f),
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
            "tokens_to_embed": est.tokens_to_embed if outcome != "safe" else 0,
            "usd": round(est.usd, 2),
            "hours": round(est.hours, 2),
            "peak_vectors": est.peak_vectors,
        }
    lines = tuple(e["line"] for e in explain_changes(b_cfg, h_cfg))
    return Classification(outcome, kind, bd, bc, hc, bt, ht, len(hf - bf), projection, lines)
