"""The key numbers of a plan, typed, selected once: what ``reindex plan --json`` prints, what the CLI, the
Markdown and HTML reports, the Prefect artifacts, the approval form and ``reindex runs`` render.

The plan stays the JSON document it always was (:class:`~reindex.planner.Plan`); :func:`key_numbers` reads
it once into a frozen :class:`KeyNumbers`. Renderers read fields of that, never the plan's dicts.

To show approvers a new number: add a field here (``summary=False`` in its metadata unless ``reindex plan
--json`` should print it too), fill it in :func:`key_numbers`, and add one row to :meth:`KeyNumbers.rows`
(the rows the Prefect table artifact shows)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from reindex.domain.kinds import ChangeKind

__all__ = ["Documents", "KeyNumbers", "forecast_line", "key_numbers"]

_EXTRA = {"summary": False}  # a field renderers read that `reindex plan --json` does not print


@dataclass(frozen=True, slots=True)
class Documents:
    added: int
    edited: int
    removed: int
    unchanged: int
    bad: int
    total: int
    raw: Mapping[str, Any] = field(repr=False)  # the plan's own dict, printed as it is by --json


@dataclass(frozen=True, slots=True)
class KeyNumbers:
    """A plan's key numbers (field order = the order of ``reindex plan --json``)."""

    kind: ChangeKind
    index: str
    plan_hash: str
    documents_changed: bool
    documents: Documents
    chunks_old: int
    chunks_new: int
    chunks_reused: int
    chunks_to_embed: int
    tokens_to_embed: int
    usd: float
    hours: float
    tokens_per_minute: float
    rate_source: str
    rate_measured: Mapping[str, Any] | None
    rate_assumes: Mapping[str, Any] | None  # basis, workers, CPUs of a measured rate (None: configured or default)
    vectors_old: int
    vectors_new: int
    peak_vectors: int
    peak_bytes: int
    approval_required: bool
    sampled: bool
    over_model_limit: Mapping[str, Any] | None  # chunks longer than the model's input (None: not counted)
    # read by renderers, not printed by --json
    tokens_new: int = field(default=0, metadata=_EXTRA)
    usd_per_mtok: float = field(default=0.0, metadata=_EXTRA)
    peak_ram_bytes: int = field(default=0, metadata=_EXTRA)
    peak_disk_bytes: int = field(default=0, metadata=_EXTRA)
    footprint_backend: str | None = field(default=None, metadata=_EXTRA)
    approval_reasons: tuple[str, ...] = field(default=(), metadata=_EXTRA)
    affected_documents: tuple[str, ...] = field(default=(), metadata=_EXTRA)
    removed_documents: tuple[str, ...] = field(default=(), metadata=_EXTRA)
    cross_document_chunks: int = field(default=0, metadata=_EXTRA)
    cross_document_tokens: int = field(default=0, metadata=_EXTRA)
    # The document changes of a pipeline-scoped plan, applied now in place under the live population's config
    # (a plan of their own): {plan_hash, kind, documents, chunks_to_embed, tokens_to_embed, file}; None: none.
    in_place_part: Mapping[str, Any] | None = field(default=None, metadata={"summary": "if-set"})
    # The index build's price (``cost.index_build``: points, CPU-seconds, seconds, where it runs, the rate's source);
    # None in a plan made before the build was priced.
    index_build: Mapping[str, Any] | None = field(default=None, metadata={"summary": "if-set"})
    # What the change buys, measured on a sample before paying (``plan --forecast``): metrics with intervals,
    # the verdict, the forecast's own cost and how the sample was drawn; None when no forecast was made.
    forecast: Mapping[str, Any] | None = field(default=None, metadata={"summary": "if-set"})
    # What the cutover's gate can tell from its queries, per gated metric (the forecast's ``power``: half_width,
    # needed_queries, queries, bound, outcome); None without a forecast.
    power: Mapping[str, Any] | None = field(default=None, metadata={"summary": "if-set"})

    def summary(self) -> dict[str, Any]:
        """What ``reindex plan --json`` prints (besides ``plan_file``)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.metadata.get("summary", True):
                v = getattr(self, f.name)
                if v is None and f.metadata.get("summary") == "if-set":
                    continue
                out[f.name] = v.raw if isinstance(v, Documents) else v
        return out

    @property
    def hours_assume(self) -> str:
        """`` (N workers × C CPUs)`` when the hours come from a measured rate, else empty."""
        a = self.rate_assumes
        if not a:
            return ""
        workers = f"{a['workers']} worker{'s' if a['workers'] != 1 else ''}"
        return f" ({workers} × {a['cpus'] // a['workers']} CPU)" if a.get("cpus") else f" ({workers})"

    def rows(self) -> list[tuple[str, str]]:
        """(quantity, value) rows for approvers: the Prefect table artifact of a plan."""
        return [
            ("kind", self.kind.value), ("plan", self.plan_hash[:12]),
            ("chunks old → new", f"{self.chunks_old:,} → {self.chunks_new:,}"),
            ("chunks reused", f"{self.chunks_reused:,}"), ("chunks to embed", f"{self.chunks_to_embed:,}"),
            ("tokens to embed", f"{self.tokens_to_embed:,}"), ("cost (USD)", f"{self.usd:.4f}"),
            ("hours", f"{self.hours:.3f}{self.hours_assume}"),
        ] + ([("index build", f"{self.index_build['cpu_seconds']:,.1f} CPU-s, {self.index_build['hours']:.3f} h "
                                f"({self.index_build['source']} rate; "
                                f"{'on the server' if self.index_build['runs'] == 'server' else 'in apply'})")]
             if self.index_build and self.index_build.get("source") != "none" else []) + [
            ("peak vectors", f"{self.peak_vectors:,}"),
            ("peak disk bytes", f"{self.peak_disk_bytes:,}"), ("peak RAM bytes", f"{self.peak_ram_bytes:,}"),
            ("approval required", str(self.approval_required).lower()),
        ] + ([("forecast verdict", forecast_line(self.forecast))] if self.forecast else [])


def forecast_line(f: Mapping[str, Any]) -> str:
    """The forecast in one line: verdict, the most informative metric with its interval, sample and cost."""
    metrics = f.get("metrics", {})
    pick = next((m for m in ("passage_mrr", "mrr", f"recall_at_{f.get('k', 10)}") if m in metrics), None)
    shown = ""
    if pick:
        m = metrics[pick]
        shown = f"; {pick} {m['old']:.3f} → {m['new']:.3f} (Δ {m['diff']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}])"
    c = f.get("cost", {})
    return (f"{f['verdict']}{shown}; {f['sample_documents']} sampled documents, {f['queries']['count']} queries; "
            f"cost {c.get('tokens', 0):,} tokens, {c.get('cpu_seconds', 0):.1f} CPU-s, {c.get('seconds', 0):.1f} s")


def key_numbers(plan: Any) -> KeyNumbers:
    """The key numbers of ``plan`` (a :class:`~reindex.planner.Plan`): the one place they are selected."""
    b = plan.body
    w, c = b["work"], b["cost"]
    d = w["documents"]
    peak = c["footprint"]["peak"]
    return KeyNumbers(
        kind=plan.kind, index=plan.index, plan_hash=plan.plan_hash, documents_changed=b["documents_changed"],
        documents=Documents(d["added"], d["edited"], d["removed"], d["unchanged"], d["bad"], d["total"], d),
        chunks_old=w["chunks_old"], chunks_new=w["chunks_new"], chunks_reused=w["chunks_reused"],
        chunks_to_embed=w["chunks_to_embed"], tokens_to_embed=w["tokens_to_embed"],
        usd=c["usd"], hours=c["hours"], tokens_per_minute=c["tokens_per_minute"], rate_source=c["rate_source"],
        rate_measured=c.get("rate_measured"), rate_assumes=c.get("rate_assumes"), vectors_old=c["vectors_old"], vectors_new=c["vectors_new"],
        peak_vectors=c["peak_vectors"], peak_bytes=peak["ram_bytes"] + peak["disk_bytes"],
        approval_required=b["approval"]["required"], sampled=b["projection"] is not None,
        over_model_limit=w.get("over_model_limit"),
        tokens_new=w["tokens_new"], usd_per_mtok=c["usd_per_mtok"], peak_ram_bytes=peak["ram_bytes"],
        peak_disk_bytes=peak["disk_bytes"], footprint_backend=c["footprint"].get("backend"),
        approval_reasons=tuple(b["approval"]["reasons"]), affected_documents=tuple(w["affected_documents"]),
        removed_documents=tuple(w.get("removed_documents", ())),
        cross_document_chunks=w["cross_document"]["chunks"], cross_document_tokens=w["cross_document"]["tokens"],
        in_place_part=b.get("in_place_part"), forecast=b.get("forecast"), index_build=c.get("index_build"),
        power=(b.get("forecast") or {}).get("power"),
    )
