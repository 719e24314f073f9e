"""Terminal text of the CLI's results: plain strings, no click, so the CLI only parses, calls and echoes.

Each function returns the lines one command prints (joined with newlines); ``--json`` output is not
rendered here except ``estimate_json`` (the estimate's key numbers).

Lines: one role, every command's terminal text, a function or two per command (split by command, each module would
import the same few formatters and hold thirty lines).
"""

from __future__ import annotations

from typing import Any, Sequence

from reindex.books.layout import Books
from reindex.domain.kinds import ChangeKind
from reindex.engine.eta import format_eta
from reindex.reports._format import human_bytes
from reindex.reports._plan_facts import (build_line, forecast_serving_line, over_limit_line, rate_note, rechunk_line, units_line,
                                         throughput_text)

__all__ = [
    "apply_text",
    "chunk_summary_text",
    "classification_text",
    "cutover_text",
    "doctor_text",
    "estimate_json",
    "estimate_text",
    "forecast_lines",
    "forecast_serving_line",
    "chains_text",
    "measure_text",
    "units_text",
    "plan_text",
    "evaluations_words",
    "serving_line",
    "serving_text",
    "status_text",
    "validation_text",
]


def _compact(n: float) -> str:
    """Compact counts for terminal lines: 1.23 B, 4.50 M, 7.00 k, 950."""
    for unit, size in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:,.0f}"


def in_place_part_line(part: Any) -> str | None:
    """One line about the document changes of a pipeline change, planned apart and applied in place now."""
    if not part:
        return None
    d = part["documents"]
    return (f"part 1, in place now: {part['kind']} plan {part['plan_hash'][:12]} ({d['added']:,} added, "
            f"{d['edited']:,} edited, {d['removed']:,} removed; {part['tokens_to_embed']:,} tokens to embed"
            f"{', needs approval' if part.get('approval_required') else ''}) under the live population's own config "
            f"→ {part['file']}; part 2, below: the pipeline change, built beside it with the same edits")


def forecast_lines(f: Any) -> list[str]:
    """What the forecast says, for the terminal: the verdict line, one line per metric, agreement and speed."""
    if not f:
        return []
    from reindex.planner import forecast_line

    out = [f"forecast (what it buys): {forecast_line(f)}"]
    if f.get("gate_outlook"):
        out.append(f"  the cutover's gate: {f['gate_outlook']}")
    for name, m in f.get("metrics", {}).items():
        out.append(f"  {name}: {m['old']:.3f} → {m['new']:.3f} (Δ {m['diff']:+.3f} [{m['low']:+.3f}, "
                   f"{m['high']:+.3f}]) {m.get('verdict') or ''}".rstrip())
    if f.get("serving"):
        out.append(f"  serving during the build: {forecast_serving_line(f['serving'])}")
    a = f.get("agreement")
    if a:
        cos = f", mean cosine {a['mean_cosine']:.4f}" if "mean_cosine" in a else " (different spaces: no cosine)"
        out.append(f"  models on {a['chunks']} sampled chunks: old {a['old_tokens_per_cpu_second']:,.0f} → new "
                   f"{a['new_tokens_per_cpu_second']:,.0f} tokens per CPU-second (×{a['speed_ratio']:.2f}){cos}")
    return out


def plan_text(plan: Any, path: Any) -> str:
    """The plan summary ``reindex plan`` and ``reindex show`` print (``path``: the plan file, or None)."""
    b = plan.body
    n = plan.numbers
    d = n.documents
    lines = [f"{n.kind}  ·  index {n.index}  ·  plan {n.plan_hash[:12]}"]
    if (part := in_place_part_line(n.in_place_part)) is not None:
        lines.append(f"  {part}")
    for e in b["explanation"]:
        lines.append(f"  {e}")
    if n.kind == ChangeKind.PAYLOAD:  # nothing added or removed, every edit kept its text: metadata only
        lines.append(f"  documents: {d.edited:,} metadata changed (same text, same chunks), "
                     f"{d.unchanged:,} unchanged, {d.bad:,} bad")
    else:
        lines.append(
            f"  documents: {d.added:,} added, {d.edited:,} edited, {d.removed:,} removed, "
            f"{d.unchanged:,} unchanged, {d.bad:,} bad"
        )
    if (read := source_read_line(b["inputs"]["corpus"])) is not None:
        lines.append(f"  {read}")
    bad = b["work"].get("bad_documents") or []
    lines += [f"    bad: {x['doc_id']}: {x['reason']}" for x in bad[:5]]
    if len(bad) > 5:
        lines.append(f"    … and {len(bad) - 5:,} more bad documents (listed in the plan's report)")
    ratio = f" (×{n.chunks_new / n.chunks_old:.2f})" if n.chunks_old else ""
    lines.append(f"  chunks: {n.chunks_old:,} → {n.chunks_new:,}{ratio}; reused {n.chunks_reused:,}, to embed {n.chunks_to_embed:,}")
    lines.append(
        f"  tokens to embed: {n.tokens_to_embed:,}  ·  ${n.usd:,.2f}  ·  {n.hours:.2f} h at "
        f"{n.tokens_per_minute:,.0f} tokens/min ({rate_note(b['cost'])})"
    )
    if (build := build_line(b["cost"])) is not None:
        lines.append(f"  index build: {build}")
    lines += [f"  {ln}" for ln in forecast_lines(n.forecast)]
    if (rc := rechunk_line(b["work"])) is not None:
        lines.append(f"  {rc}")
    if (ul := units_line(b["work"])) is not None:
        lines.append(f"  {ul}")
    if (over := over_limit_line(plan)) is not None:
        lines.append(f"  warning: {over}")
    if n.cross_document_chunks:
        lines.append(f"  cross-document reuse would save {n.cross_document_chunks:,} more chunks ({n.cross_document_tokens:,} tokens)")
    lines.append(
        f"  vectors: {n.vectors_old:,} → {n.vectors_new:,}, peak {n.peak_vectors:,} "
        f"(RAM {human_bytes(n.peak_ram_bytes)}, disk {human_bytes(n.peak_disk_bytes)} at the peak"
        + (f", {n.footprint_backend} store" if n.footprint_backend else "") + ")"
    )
    if b["projection"]:
        p = b["projection"]
        iv = p["intervals"]
        lines.append(
            f"  projected from a sample of {p['sample']} of {p['population']} documents (seed {p['seed']}): "
            f"chunks {iv['chunks_new']['estimate']:,.0f} [{iv['chunks_new']['low']:,.0f}, {iv['chunks_new']['high']:,.0f}], "
            f"tokens to embed {iv['tokens_to_embed']['estimate']:,.0f} [{iv['tokens_to_embed']['low']:,.0f}, {iv['tokens_to_embed']['high']:,.0f}]"
        )
    if n.approval_required:
        lines.append("  approval required: " + "; ".join(n.approval_reasons))
    if n.affected_documents:
        ids = n.affected_documents
        lines.append(f"  affected: {', '.join(ids[:8])}" + (f" … and {len(ids) - 8} more" if len(ids) > 8 else ""))
    if path is not None:
        lines.append(f"  plan: {path}")
    return "\n".join(lines)


def source_read_line(corpus: dict) -> str | None:
    """How the plan read the source: from its cursor (what was listed and read), or whole and why (None for
    plans made before cursors)."""
    read = corpus.get("read")
    if not read:
        return None
    if read["mode"] == "cursor":
        return f"source read from its cursor ({read['cursor']}): {read.get('how', '')}"
    return (f"source read whole ({read.get('documents_read', 0):,} documents, {human_bytes(read.get('bytes_read', 0))}): "
            f"{read.get('why') or 'a full read'}")


def classification_text(r: Any) -> str:
    """The Markdown comment ``reindex classify --format md`` prints (for a CI job)."""
    icon = {"safe": "✅", "payload-only": "✅", "text-affecting": "⚠️", "structural": "🛑"}[r.outcome]
    lines = [f"### reindex: {icon} {r.outcome} ({r.kind})", ""]
    lines += [f"- `{e}`" for e in r.explanation] or ["- no config field changed"]
    lines += ["", f"Fixture of {r.fixture_documents:,} documents: {r.chunks_base:,} → {r.chunks_head:,} chunks, "
              f"{r.fingerprints_changed:,} new chunk texts, {r.tokens_base:,} → {r.tokens_head:,} tokens."]
    if r.outcome == "payload-only":
        lines += ["", "Payload-only: no chunk and no vector changes; every point's payload is rewritten in place "
                  "(nothing is embedded)."]
    p = r.projection
    if p:
        pct = f", {p['change_pct']:+.0f} %" if p.get("change_pct") is not None else ""
        tokens = p.get("tokens_to_embed", p.get("tokens_to_embed_max", 0))
        lines += ["", f"**Projected:** {_compact(p['chunks_head'])} chunks{pct}, {_compact(tokens)} tokens to re-embed "
                  f"({p['method']})."]
        if "usd" in p:
            lines[-1] += f" ${p['usd']:,.2f}, {p['hours']:,.1f} h, peak {_compact(p['peak_vectors'])} vectors."
    return "\n".join(lines)


def _docs(n: int, adjective: str = "") -> str:
    return f"{n:,} {adjective}document{'' if n == 1 else 's'}"


def apply_text(r: Any) -> str:
    """What ``reindex apply`` prints about a finished (or refused) run."""
    if r.status == "nothing-to-do":
        return "nothing to do: the plan is `none`"
    if r.status == "already-applied":
        return f"plan {r.plan_hash[:12]} was already applied to {r.collection}; nothing changed"
    rep = r.report
    a, p = rep["actual"], rep["planned"]
    embedded = (f"embedded {a['embedded']:,} texts ({a['tokens_embedded']:,} tokens; planned {p['chunks_to_embed']:,} / "
                f"{p['tokens_to_embed']:,})")
    if r.kind == ChangeKind.PAYLOAD:
        work = (f"  payloads rewritten {a.get('payload_updated', 0):,} points of {_docs(a['documents'])}, in place; "
                "nothing embedded, no vector written")
    elif r.kind == ChangeKind.DOCUMENT:  # the plan's chunk count is the whole index's, not the affected documents'
        work = (f"  chunks written {a['chunks_written']:,} for {_docs(a['documents'], 'affected ')} (the index holds "
                f"{p['chunks_new']:,} chunks after the change); reused {a['reused_from_old'] + a['reused_from_target']:,} "
                f"vectors in place; {embedded}")
    else:
        work = (f"  chunks written {a['chunks_written']:,} (planned {p['chunks_new']:,}); reused {a['reused_from_old']:,} "
                f"from the old population, {a['reused_from_target']:,} already in place; {embedded}")
    lines = [
        f"{r.status}: {r.kind} → {r.collection} in {rep['seconds']:.1f} s",
        work,
        f"  points in {r.collection}: {a['points_in_collection']:,}; deleted {a['deleted']:,}; shards run {a['shards_run']}, "
        f"skipped {a['shards_skipped']}",
    ]
    carried = rep.get("carried") or {}
    if carried.get("id"):
        lines.append(f"  chunks of {_docs(carried['documents'])} taken from the plan (not tokenized again), "
                     f"{_docs(carried['chunked'])} chunked here")
    for problem in (carried.get("problems") or [])[:3]:
        lines.append(f"  carried chunks not used: {problem}")
    if a.get("payload_updated") and r.kind != ChangeKind.PAYLOAD:
        lines.append(f"  payloads overwritten in place: {a['payload_updated']:,} points (no vector written)")
    if a["truncated"]:
        lines.append(f"  {a['truncated']:,} chunks were longer than the model's input limit and were truncated")
    m = (rep.get("throughput") or {}).get("recorded")
    if m:
        lines.append(f"  embedding throughput {throughput_text(m)}: recorded, the next plan of this model uses it")
    b = rep.get("index_build")
    if b:
        kept = ("recorded, the next plan with these graph parameters prices its build from it" if b.get("recorded")
                else "too small to record as the build's rate")
        lines.append(f"  index build: {b['points']:,} points in {b['cpu_seconds']:g} CPU-s ({b['seconds']:g} s): {kept}")
    if rep["catch_up"]["documents"]:
        lines.append(f"  catch-up replayed {rep['catch_up']['documents']} documents that changed during the build")
    for f in rep["failures"][:10]:
        lines.append(f"  failed: shard {f.get('shard')}: {f.get('doc_id', '')} {f.get('reason')}")
    if r.report_path:
        lines.append(f"  run report: {r.report_path}")
    if r.status == "done" and ChangeKind.of(r.kind).needs_cutover:
        plan = str(Books.plan_of_run_report(r.report_path)) if r.report_path else "PLAN"
        first = ChangeKind.of(r.kind) is ChangeKind.INITIAL
        lines.append(f"next: `reindex cutover {plan}` " + (
            "creates the alias readers query (nothing is served until then)" if first else
            "compares it with the live population on the same queries and moves the alias if the gate passes "
            "(readers are served the live population until then)"))
    return "\n".join(lines)


def chains_text(r: dict) -> str:
    """The table ``reindex measure --chains`` prints: sticky vs stateless over revision chains."""
    lines = [f"revision chains from {r['source']}: {len(r['chains'])} files × {r['revisions']} revisions; tokens of {r['tokenizer']}"]
    for c in r["chunkers"]:
        b = c["bounds"]
        lines.append(f"  {c['spec']} (sticky bounds [{b['lo']}, {b['hi']}] tokens, max_drift {b['max_drift']:g}, "
                     f"max_out_of_bounds {b['max_out_of_bounds']:g})")
        for lang, s in c["summary"].items():
            mid, lo, hi = s["ratio_sticky_stateless"]  # (mean, 95 % low, high) of bootstrap_mean
            d = s["rc_diff_points"]
            lines.append(
                f"    {lang:<4} {s['chains']} chains, {s['revisions']} revisions: mean R_c sticky {s['rc_mean_sticky']:.1%} vs "
                f"stateless {s['rc_mean_stateless']:.1%} (diff {d[0]:+.1f} points [{d[1]:+.1f}, {d[2]:+.1f}])")
            lines.append(
                f"         tokens embedded after the initial build: sticky {s['tokens_sticky']:,}, stateless "
                f"{s['tokens_stateless']:,}, whole edited documents {s['tokens_whole_documents']:,}; sticky ÷ stateless "
                f"{mid:.3f} [{lo:.3f}, {hi:.3f}] (mean per chain); re-cuts {s['recuts']}")
            if s.get("final_distance") is not None:
                lines.append(f"         final revision's drift: W1/median {s['final_distance']:.3f}, out of bounds "
                             f"{s['final_out_of_bounds']:.1%} (fresh cut {s['final_fresh_out_of_bounds']:.1%})")
    return "\n".join(lines)


def units_text(r: dict) -> str:
    """The table ``reindex measure --unit`` prints: R_c at chunk and unit level, composed-vs-whole quality."""
    from reindex.measure.units import units_markdown

    return units_markdown(r)


def measure_text(r: Any) -> str:
    """The R_c table ``reindex measure`` prints."""
    lines = [f"R_c over {r.pairs} pairs ({', '.join(r.langs)}) from {r.source}; tokens of {r.tokenizer}"]
    bands = ["<=5%", "5-20%", "20-50%", ">50%", "all"]
    head = f"  {'chunker':<34} {'lang':<4} {'median tok':>10} " + " ".join(f"{b:>7}" for b in bands) + "  no-edit  fail"
    lines.append(head)
    for c in r.chunkers:
        for lang in r.langs:
            by = {b.band: b for b in c.bands if b.lang == lang}
            cells = " ".join(f"{100 * by[b].rc_mean:6.1f}%" if b in by and by[b].rc_mean is not None else f"{'–':>7}" for b in bands)
            med = c.median_by_lang.get(lang, 0.0)
            lines.append(f"  {c.spec:<34} {lang:<4} {med:>10.0f} {cells}  {c.no_edit_rc:>7g}  {c.failures:>4}")
        for x in c.retrieval:
            lines.append(f"  {'':<34} {x.lang:<4} retrieval: evidence recall {100 * x.evidence_recall:.1f}%, Hit@5 "
                         f"{100 * x.hit_at_5:.1f}%, MRR {x.mrr:.3f}, nDCG@5 {x.ndcg_at_5:.3f}" + (f" ({x.note})" if x.note else ""))
    lines.append("  (mean of per-pair R_c by edit band; paired differences and intervals in --json / --report)")
    for w in r.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def chunk_summary_text(s: Any) -> str:
    """The chunk-length summary ``reindex chunk --summary`` prints."""
    lines = [
        f"{s.chunker}",
        f"  documents {s.documents:,}   chunks {s.chunks:,}   tokens {s.tokens:,}",
        f"  chunk tokens: p10 {s.p10_tokens:.0f} · median {s.median_tokens:.0f} · p90 {s.p90_tokens:.0f} · max {s.max_tokens}",
    ]
    if s.over_model_limit:
        lines.append(f"  {s.over_model_limit:,} chunks exceed the model's input limit and would be truncated")
    if s.bad_documents:
        reasons = ", ".join(f"{k}: {v}" for k, v in s.bad_reasons.items())
        lines.append(f"  bad documents: {s.bad_documents} ({reasons})")
    return "\n".join(lines)


def validation_text(config_path: str, v: Any) -> str:
    """What ``reindex validate`` prints: the identities of a valid config and its warnings."""
    lines = [f"{config_path}: {'valid' if getattr(v, 'valid', True) else 'parses, but cannot be used (see the errors)'}"]
    rows = [
        ("index (alias)", v.identity.index),
        ("collection", v.identity.collection),
        ("chunker", v.chunker),
        ("text id", v.identity.text_id),
        ("vector id", v.identity.vector_id),
        ("pipeline id", v.identity.pipeline_id),
    ]
    for key, value in rows:
        lines.append(f"  {key:<14} {value}")
    for w in v.warnings:
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def estimate_json(e: Any) -> dict[str, Any]:
    """The key numbers of a histogram estimate (``reindex estimate --json``)."""
    return {
        "documents": e.documents,
        "chunks_old": e.chunks_old,
        "chunks_new": e.chunks_new,
        "ratio": round(e.ratio, 4),
        "tokens_billed_old": e.tokens_billed_old,
        "tokens_full_reembed": e.tokens_full_reembed,
        "tokens_reused": e.tokens_reused,
        "tokens_to_embed": e.tokens_to_embed,
        "usd": round(e.usd, 2),
        "hours": round(e.hours, 2),
        "vectors_old": e.chunks_old,
        "vectors_new": e.chunks_new,
        "peak_vectors": e.peak_vectors,
        "peak_bytes": e.footprint.peak.ram_bytes + e.footprint.peak.disk_bytes,
        "chunks_no_overlap": e.sensitivity.chunks_no_overlap,
        "tail_chunks": e.sensitivity.tail_chunks,
        "tail_chunk_share": round(e.sensitivity.tail_chunk_share, 4),
    }


def estimate_text(e: Any, old: str, new: str, usd_per_mtok: float, tokens_per_minute: float) -> str:
    """What ``reindex estimate`` prints."""
    return "\n".join([
        f"{old} → {new} over {e.documents:,} documents",
        f"  vectors {_compact(e.chunks_old)} → {_compact(e.chunks_new)} (×{e.ratio:.2f}), peak {_compact(e.peak_vectors)} during cutover",
        f"  tokens: {_compact(e.tokens_full_reembed)} for a full re-embed, {_compact(e.tokens_to_embed)} after reusing single-chunk documents",
        f"  ${e.usd:,.2f} at ${usd_per_mtok}/M tokens · {e.hours:,.2f} h at {_compact(tokens_per_minute)} tokens/min",
        f"  at 0 % overlap: {_compact(e.sensitivity.chunks_no_overlap)} chunks; documents over "
        f"{e.sensitivity.tail_tokens:,} tokens make {_compact(e.sensitivity.tail_chunks)} chunks "
        f"({e.sensitivity.tail_chunk_share:.0%})",
    ])


def first_build_line(alone: dict) -> str:
    """The figures of a first build's population on the cutover's queries (nothing to compare with)."""
    agg, kk = alone["aggregate"], alone["k"]
    names = ((f"recall_at_{kk}", f"recall@{kk}"), (f"ndcg_at_{kk}", f"nDCG@{kk}"), ("mrr", "MRR"),
             ("evidence_recall", "evidence recall"))
    figures = [f"{label} {agg[m]:.3f} ({agg[f'{m}_queries']} labelled)" for m, label in names if m in agg]
    figures.append(f"latency p50 {agg.get('latency_p50_ms', 0):.1f} ms")
    return (f"first build, nothing to compare with: {agg['queries']} queries on {alone['collection']}: "
            + " · ".join(figures))


def cutover_text(r: Any) -> str:
    """What ``reindex cutover`` prints: verdict, gate rules, metrics, the alias move and the report path."""
    rep = r.report
    lines = [f"{'PASS' if r.passed else 'FAIL'}: {rep['index']}: {rep['live'] or 'no alias'} → {rep['shadow']} "
             f"({rep['queries_source']})"]
    if rep.get("caught_up"):
        lines.append(f"  caught up first: {rep['caught_up']['documents']} documents changed since {rep['shadow']} "
                     "was built were replayed into it")
    for rule in rep["rules"]:
        lines.append(f"  {'ok  ' if rule['passed'] else 'FAIL'} {rule['rule']}: {rule['detail']}")
    if rep.get("index_health"):
        lines += [f"  {ln}" for ln in index_health_lines(rep)]
    if rep["evaluation"]:
        agg = rep["evaluation"]["aggregate"]
        kk = rep["k"]
        if "verdict" in agg:
            per = ", ".join(f"{m} {v}" for m, v in agg.get("metrics", {}).items())
            words = rep.get("verdict_words") or agg["verdict"]
            lines.append(f"  verdict: {words}" + (f" ({per})" if per else ""))
        if rep.get("forecast"):
            lines.append(f"  forecast: {rep['forecast']['line']}")
        metric = rep.get("metric") or f"recall_at_{kk}"
        for name, values in (rep.get("segments") or {}).items():
            for value, seg in values.items():
                d = seg.get(metric)
                label = metric.replace("_at_", "@")
                shown = (f"{label} {d['old']:.3f} → {d['new']:.3f} (Δ {d['diff']:+.3f} [{d['low']:+.3f}, "
                         f"{d['high']:+.3f}], Holm level {d['level']:.4f})" if d else "no labelled queries")
                lines.append(f"  {name}={value} ({seg['queries']} queries): {shown}: {seg['verdict']}")
        lines.append(f"  overlap@{kk} {agg.get(f'overlap_at_{kk}', 0):.3f} · RBO {agg.get('rbo', 0):.3f} · latency p50 "
                     f"{agg.get('latency_old_p50_ms', 0):.1f} → {agg.get('latency_new_p50_ms', 0):.1f} ms")
        sides = rep["evaluation"].get("sides")
        if sides:
            lines.append(f"  models: old {sides['old']['label']} → new {sides['new']['label']}")
        a = rep["evaluation"].get("agreement")
        if a:
            cos = f", mean cosine {a['mean_cosine']:.4f}" if "mean_cosine" in a else " (different spaces)"
            lines.append(f"  models on {a['chunks']} chunks: old {a['old_tokens_per_cpu_second']:,.0f} → new "
                         f"{a['new_tokens_per_cpu_second']:,.0f} tokens per CPU-second (×{a['speed_ratio']:.2f}){cos}")
        for m in (f"recall_at_{kk}", "mrr", "passage_mrr", "evidence_recall"):
            if f"{m}_diff" in agg:
                d = agg[f"{m}_diff"]
                lines.append(f"  {m}: {agg[f'{m}_old']:.3f} → {agg[f'{m}_new']:.3f} "
                             f"(Δ {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}])")
    if rep.get("first_build"):
        lines.append("  " + first_build_line(rep["first_build"]))
    if rep["swap"]:
        lines.append(f"  alias {rep['index']} → {rep['shadow']} (previous: {rep['swap']['from'] or 'none'}; "
                     f"`reindex rollback` restores it)")
    else:
        lines.append("  alias not moved")
    lines.append(f"  report: {r.report_path}")
    return "\n".join(lines)


def index_health_lines(rep: dict[str, Any]) -> list[str]:
    """The cutover's index health: per side its index, recall@10 against exact search and latency; the check's cost."""
    h = rep["index_health"]
    out = []
    for side in ("old", "new"):
        d = h.get(side)
        if not d:
            continue
        r = d.get("recall_at_10_vs_exact")
        lat = (f", latency p50/p95 {d['latency_ms_p50']:.2f}/{d['latency_ms_p95']:.2f} ms"
               if d.get("latency_ms_p95") is not None else "")
        out.append(f"index {side}: {d['collection']} {d['indexed_vectors']:,} of {d['points']:,} vectors indexed, "
                   f"searched {d['searched']}; recall@10 vs exact "
                   f"{format(r, '.3f') if r is not None else '—'} on {d.get('sampled', 0)} stored vectors{lat}")
    share = f" ({h['share_of_cutover']:.0%} of the cutover's {rep['seconds']:.2f} s)" if h.get("share_of_cutover") else ""
    return out + [f"index health checked in {h['seconds']:.2f} s{share}"]


def index_line(ix: dict[str, Any]) -> str:
    """One population's index state for ``reindex status``."""
    ready = "" if ix.get("ready", True) else f" (NOT READY: {ix['detail']})"
    return f"index {ix['indexed_vectors']:,}/{ix['points']:,} vectors, searched {ix['searched']}{ready}"


def status_text(st: dict[str, Any]) -> str:
    """What ``reindex status`` prints: the alias, every population and the lock."""
    import time

    from reindex.books.locks import lease_words

    lines = [f"index {st['index']}: alias → {st['aliases'].get(st['index'], 'none')}"]
    for p in st["populations"]:
        prog = p.get("progress")
        if prog:
            pts = f"shards {prog['shards_done']}/{prog['shards_total']} done"
            if prog.get("tokens_planned"):
                pts += (f", {prog.get('tokens_done') or 0:,}/{prog['tokens_planned']:,} tokens, "
                        f"{prog.get('tokens_per_second') or 0:,.0f} tok/s, ETA {format_eta(prog.get('eta_seconds'))}")
        elif p["points"] is not None:
            pts = f"{p['points']:,} points"
        else:
            pts = "not readable yet" if p.get("exists") else "deleted"
        m = p.get("model") or {}
        model = f"  {m.get('label') or m['model']}" if m.get("provider") else ""
        lines.append(f"  {p['state']:<9} {p['collection']}  {pts}  {p['chunker']}{model}  ({p['age_days']} days)")
        if p.get("index") and p["state"] == "live":
            lines.append(f"            {index_line(p['index'])}")
    lock = st["lock"]
    if lock and lock.get("pid") is not None:
        since = (f" since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(lock['since']))}"
                 if lock.get("since") else "")
        lease = lease_words((lock.get("expires") or 0.0) - time.time())
        if lock.get("lease_s"):
            lease = f"{lock['lease_s']:g} s lease, {lease}"
        lines.append(f"  locked by pid {lock['pid']} on {lock['host']}{since} ({lock['purpose']}); {lease}")
    elif lock:
        lines.append(f"  locked by {lock['owner']} ({lock['purpose']})")
    sv = st.get("serving") or {}
    if sv.get("evidence") or sv.get("mode", "old") != "old":
        lines.append(f"  {serving_line(sv)}")
    return "\n".join(lines)


def _cost_words(c: dict[str, Any]) -> str:
    """What a reader pays per query in a mode, in a few words."""
    if not c:
        return ""
    shadow = (f", {c['from_shadow_per_query']:g} of {c['candidates_per_query']:g} candidates read from the shadow"
              if "candidates_per_query" in c else "")
    return (f"readers pay ~{c['embedded_per_query']:g} embeddings{shadow}, p50 {c['reader_ms_p50']:,.1f} / p95 "
            f"{c['reader_ms_p95']:,.1f} ms per query")


def serving_line(sv: dict[str, Any]) -> str:
    """The serving mode readers follow, in one line: mode, since, the gated evidence of each mode with what a reader
    pays for it, staleness, and what the evaluations cost the build."""
    import time

    since = f" since {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(sv['since']))}" if sv.get("since") else ""
    ev = sv.get("evidence") or {}
    parts = []
    for name, e in (ev.get("modes") or {}).items():
        g = e.get("gate") or {}
        verdict = "passes" if e.get("passed") else "refused"
        shown = f" {g['metric']} {g['diff']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]" if "diff" in g else ""
        cost = e.get("cost") or {}
        paid = f" (p95 {cost['reader_ms_p95']:,.1f} ms, {cost['embedded_per_query']:g} embedded per query)" if cost else ""
        parts.append(f"{name}{shown}{paid} {verdict}")
    at = (f"; evaluated at {ev['shards_done']}/{ev['shards_total']} shards, {ev.get('pairs', 0):,} pairs"
          + (" (stale: more shards built since)" if sv.get("stale") else "")) if ev else ""
    why = f" ({sv['reason']})" if sv.get("reason") and not parts else ""
    return f"serving {sv.get('mode', 'old')}{since}{why}" + (f": {'; '.join(parts)}" if parts else "") + at \
        + evaluations_words(sv.get("evaluations") or {})


def evaluations_words(a: dict[str, Any]) -> str:
    """What a build's serving evaluations cost it ("; 3 evaluations, 4.1 CPU-s = 6 % of the build's 70 CPU-s")."""
    if not a.get("count"):
        return ""
    share = (f" = {a['share']:.0%} of the build's {a['build_cpu_seconds']:,.0f} CPU-s (at most "
             f"{a.get('budget', 0.1):.0%})") if a.get("share") is not None else ""
    waited = f", {a['deferred']} deferred to stay within it" if a.get("deferred") else ""
    return f"; {a['count']} evaluation{'s' if a['count'] != 1 else ''}, {a['cpu_seconds']:,.1f} CPU-s{share}{waited}"


def serving_text(r: dict[str, Any]) -> str:
    """What ``reindex serving`` prints: the mode line, what readers pay natively, then each mode's cost and rules."""
    lines = [f"index {r['index']}: {serving_line(r)}"]
    if r.get("reason"):
        lines.append(f"  {r['reason']}")
    ev = r.get("evidence") or {}
    native = (ev.get("native") or {}).get("old")
    if native:
        lines.append(f"  old (native): {_cost_words(native)}; measured {ev.get('cost_measured', 'from a reader')}")
    for name, e in (ev.get("modes") or {}).items():
        c = e.get("cost") or {}
        b = e.get("bridge") or {}
        fitted = f" ({b['kind']} on {b['pairs']:,} pairs, {b['id'][:12]})" if b else ""
        opened = f"; opening the shadow costs a new reader {c['open_ms']:,.1f} ms once" if c.get("open_ms") else ""
        lines.append(f"  {name}{fitted}" + (f": {_cost_words(c)}{opened}" if c else "") + ":")
        for rule in e.get("rules", []):
            lines.append(f"    {'ok  ' if rule['passed'] else 'FAIL'} {rule['rule']}: {rule['detail']}")
    return "\n".join(lines)


def recovered_text(rec: dict | None) -> str | None:
    """One line about an alias move a killed process left behind and this command completed or undid."""
    if not rec:
        return None
    return (f"recovered an interrupted {rec['recovered']}: {rec['outcome']} "
            f"({rec.get('from') or 'none'} → {rec['to']})")


def decision_text(d: Any) -> str:
    """What `reindex approve [--reject]` recorded and which paused runs it resumed."""
    lines = [f"{'approved' if d.approved else 'rejected'} plan {d.plan_hash[:12]} ({d.kind}) by {d.by}; "
             f"recorded in {d.record}"]
    for r in d.resumed:
        lines.append(f"resumed flow run {r.flow_run_name} ({r.flow_run_id}) of {r.flow}/{r.index}, paused since "
                     f"{r.paused_at}: it {'applies the plan now' if d.approved else 'ends without changing anything'}")
    if d.note:
        lines.append(d.note)
    return "\n".join(lines)


def waiting_runs_text(waiting: Sequence[Any]) -> str:
    """`reindex runs`: the runs paused waiting for approval, with plan, footprint and deadline."""
    if not waiting:
        return "no run is waiting for approval"
    lines = []
    for r in waiting:
        lines += [
            f"{r.flow}/{r.index}  run {r.flow_run_name} ({r.flow_run_id})  paused since {r.paused_at}",
            f"  plan      {r.plan}  ({r.plan_hash[:12]}, {r.kind})",
            f"  footprint peak {r.peak_vectors:,} vectors, {human_bytes(r.peak_disk_bytes)} disk, "
            f"{human_bytes(r.peak_ram_bytes)} RAM; {r.tokens_to_embed:,} tokens to embed, ${r.usd:,.4f}",
            *([f"  forecast  {r.forecast}"] if getattr(r, "forecast", None) else []),
            f"  deadline  {r.deadline} (rejected automatically after)",
            f"  decide    reindex approve {r.plan} --by NAME   (or --reject)",
        ]
    return "\n".join(lines)


def sync_text(r: Any) -> str:
    """What ``reindex sync`` prints: the outcome, and the plan file when there is one."""
    lines = [f"{r.outcome}: {r.message}"]
    if r.plan_file and r.outcome.value != "awaiting-approval":
        lines.append(f"  plan: {r.plan_file}")
    if r.apply and r.apply.get("report_path"):
        lines.append(f"  run report: {r.apply['report_path']}")
    for g in r.gc:
        lines.append(f"  gc: deleted {g['collection']} (retired {g['age_days']} days ago)")
    if getattr(r, "replanned", 0):
        lines.append(f"  planned again {r.replanned} time(s): the plan's inputs moved before its apply")
    return "\n".join(lines)


_POINT_KINDS = ("missing-points", "unlisted-points", "stale-points", "mixed-vector-ids", "payload-text-mismatch",
                "wrong-dimension", "vector-mismatch")


def doctor_text(r: Any) -> str:
    """What ``reindex doctor`` prints: one line per finding, then what to do (a :class:`DoctorReport`)."""
    def stored(p: dict) -> str:
        if r.mode == "full" and not p["scanned"]:
            if p["points"] == p["listed"]:
                return f"{p['points']:,} stored, as many as listed: every stored point is a listed one, none scrolled"
            return (f"{p['points']:,} stored = {p['listed']:,} listed less {p['listed'] - p['points']:,} missing: every "
                    "stored point is a listed one, none scrolled")
        return f"{p['scanned']:,} stored points"

    looked = "; ".join(f"{p['collection']}: {p['checked']:,} of {p['listed']:,} listed points, {stored(p)}, "
                       f"{p['embedded']:,} vectors re-embedded" for p in r.populations) or "no population to read"
    mode = "every point" if r.mode == "full" else "a sample (`--full` checks every point)"
    head = f"index {r.index}: {'healthy' if r.healthy else f'{len(r.findings)} finding(s)'} ({mode}; {looked}; " \
           f"{r.seconds:.1f} s)"
    lines = [head]
    for p in r.populations:
        h = p.get("index_health")
        if h:
            rec = h.get("recall_at_10_vs_exact")
            lines.append(f"  index of {h['collection']}: {h['indexed_vectors']:,} of {h['points']:,} vectors indexed, "
                         f"searched {h['searched']}; recall@10 vs exact {format(rec, '.3f') if rec is not None else '—'} "
                         f"on {h['sampled']} stored vectors; ANN p50/p95 {h['ann_ms_p50']:.2f}/{h['ann_ms_p95']:.2f} ms")
    for f in r.findings:
        eg = f" (e.g. {', '.join(f.examples[:2])})" if f.examples and f.kind in _POINT_KINDS else ""
        lines.append(f"  {f.kind:<24} {f.detail}{eg}")
    for line in r.advice:
        lines.append(f"  do: {line}")
    for line in r.notes:
        lines.append(f"  note: {line}")
    return "\n".join(lines)

