"""What both plan documents (Markdown and HTML) say: the change lines, key numbers, footprint,
projection, tail and what-if rows, title and baseline line."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from reindex.domain.kinds import ChangeKind
from reindex.reports._format import duration, human_bytes, num, pct, ratio, usd

if TYPE_CHECKING:
    from reindex.planner import Plan

__all__ = ["baseline_line", "build_line", "change_lines", "footprint_rows", "forecast_facts", "forecast_rows", "forecast_serving_line", "key_rows", "over_limit_line", "peak_note", "plan_title",
           "projection_rows", "rate_note", "readers_words", "rechunk_line", "tail_line", "units_line", "throughput_text",
           "what_if_rows"]

FIELD_LABELS = {
    "chunks_old": "chunks (old population)",
    "chunks_new": "chunks (new population)",
    "chunks_reused": "chunks reused",
    "chunks_to_embed": "chunks to embed",
    "tokens_new": "tokens (new population)",
    "tokens_to_embed": "tokens to embed",
    "payload_bytes": "payload bytes (new)",
}
RATE_SOURCES = {
    "config": "from the config (cost.tokens_per_minute)",
    "apply": "measured by the last `reindex apply` of this model",
    "calibration": "measured by `reindex calibrate`",
    "sampled": "measured by this plan on sampled chunks of the corpus (no apply or calibration of this model yet)",
    "default": "a default assumption; the next apply measures it, or run `reindex calibrate`",
}


def rate_note(cost: Mapping[str, Any]) -> str:
    """Where the plan's throughput comes from, and for a measured one when and where it was measured."""
    source = cost.get("rate_source", "default")
    text = RATE_SOURCES.get(source, source)
    m = cost.get("rate_measured") or {}
    if m:
        where = f" on {m['machine']}" if m.get("machine") else ""
        when = f" at {m['at'].replace('T', ' ').replace('+00:00', ' UTC')}" if m.get("at") else ""
        plan = f" (plan {m['plan_hash'][:12]})" if m.get("plan_hash") else ""
        amount = f": {throughput_text(m)}" if m.get("tokens") and m.get("seconds") else ""
        text += f"{plan}{where}{when}{amount}"
    a = cost.get("rate_assumes")
    if a:
        workers = f"{a['workers']} embedding worker{'s' if a['workers'] != 1 else ''}"
        text += (f"; the hours assume {workers} using {a['cpus']} CPU{'s' if a['cpus'] != 1 else ''} of an idle machine "
                 f"at {a['tokens_per_cpu_second']:,.0f} tokens per CPU-second" if a.get("cpus") else
                 f"; the hours assume {workers} at the measured rate per worker")
    return text


def build_line(cost: Mapping[str, Any]) -> str | None:
    """The index build's price in one line (``cost.index_build``), beside the embedding's hours; None for a plan
    made before the build was priced."""
    b = cost.get("index_build")
    if not b:
        return None
    p = b["params"]
    graph = f"m {p['m']}, ef_construct {p['ef_construct']}, {p['precision']}, {p['dimension']} dims"
    if b["source"] == "none":
        return f"none: {num(b['points'])} points searched by brute force (store.backend local; {graph})"
    where = ("on the Qdrant server, after apply hands it the points (Qdrant's automatic indexing threads assumed: "
             f"{b['threads']})" if b["runs"] == "server" else f"in apply, on {b['threads']} indexing "
             f"thread{'s' if b['threads'] != 1 else ''}")
    m = b.get("measured")
    if b["source"] == "apply" and m:
        when = f" at {m['at'].replace('T', ' ').replace('+00:00', ' UTC')}" if m.get("at") else ""
        load = f", load {m['load']:g} on {m['cpus']} CPUs" if m.get("load") is not None and m.get("cpus") else ""
        source = (f"rate measured by the apply of plan {str(m.get('plan_hash') or '')[:12]}{when}: "
                  f"{num(m['points'])} points in {m['cpu_seconds']:g} CPU-s{load}, grown along the bench's curve")
    else:
        source = "rate: the bench's figures (bench/RESULTS.md); the next apply with these parameters measures it"
    return (f"{num(b['points'])} points × {1000 * b['cpu_seconds_per_point']:.3f} ms of CPU = "
            f"{b['cpu_seconds']:,.1f} CPU-s, {_wall(b['seconds'])} {where} ({graph}; {source})")


def _wall(seconds: float) -> str:
    """Wall time of a build: under a second as such (``duration`` rounds up to whole seconds)."""
    return "under 1 s" if seconds < 1 else duration(seconds / 3600)


def throughput_text(m: Mapping[str, Any]) -> str:
    """A measured embedding rate as recorded: per CPU-second and per worker wall-second with the workers,
    threads, load and CPUs beside it (records from before CPU time was measured: tokens/min of wall time)."""
    if not m.get("tokens_per_cpu_second"):
        return f"{m['tokens']:,} tokens in {m['seconds']:g} s of embedding"
    workers = m.get("workers") or 1
    wall = m["tokens"] / m["seconds"] if m.get("seconds") else 0.0
    threads = f", {m['threads']} thread{'s' if m['threads'] != 1 else ''} each" if m.get("threads") else ""
    load = f"; load {m['load']:g} on {m['cpus']} CPUs" if m.get("load") is not None and m.get("cpus") else ""
    return (f"{m['tokens']:,} tokens in {m['cpu_seconds']:g} CPU-s ({m['tokens_per_cpu_second']:,.0f} per CPU-second) and "
            f"{m['seconds']:g} s of embedding ({wall:,.0f} per worker wall-second; {workers} worker"
            f"{'s' if workers != 1 else ''}{threads}{load})")


def over_limit_line(plan: Any) -> str | None:
    """The warning every form of a plan shows when chunks exceed the model's input limit (None when none do,
    or the limit is unknown); the plan tokenised every chunk, so this is a count, not a guess."""
    o = plan.body["work"].get("over_model_limit")
    if not o or not o["chunks"]:
        return None
    where = " of the sampled documents" if plan.body.get("projection") else ""
    own = " (the model's own tokenizer)" if o["tokenizer"] == plan.body["config"]["vector"]["model"] else ""
    longest = ", ".join(f"{x['doc_id']}#{x['ordinal']} ({x['tokens']:,})" for x in (o.get("longest") or [])[:5])
    return (f"{o['chunks']:,} of {o['of']:,} chunks{where} exceed the model's input limit of {o['limit']:,} tokens "
            f"(counted with {o['tokenizer']}{own}): the model truncates them and their tails are not in the vectors"
            + (f"; the longest: {longest}" if longest else "") + "; lower the chunk size to fit")


def change_lines(plan: Plan) -> list[str]:
    """The "What changes" lines."""
    b = plan.body
    d = b["work"]["documents"]
    lines = list(b.get("explanation") or [])
    moved = f"{num(d['added'])} documents added, {num(d['edited'])} edited, {num(d['removed'])} removed"
    if plan.kind == ChangeKind.INITIAL:
        lines.insert(0, f"Initial build: {num(d['total'])} documents, no live population yet")
    elif plan.kind == ChangeKind.NONE:
        lines.insert(0, "Nothing changes: the config and every document match the baseline")
    elif plan.kind == ChangeKind.PAYLOAD:
        lines.append(f"Payload only: the payloads of {num(len(b['work'].get('affected_documents', [])))} documents "
                     "are rewritten in place; no text is embedded and no vector is written")
    elif plan.kind == ChangeKind.DOCUMENT or b.get("documents_changed"):
        lines.append(moved)
    if (part := b.get("in_place_part")):
        pd = part["documents"]
        lines.insert(0, f"Two parts: the document changes ({num(pd['added'])} added, {num(pd['edited'])} edited, "
                        f"{num(pd['removed'])} removed; {num(part['tokens_to_embed'])} tokens) are applied in place now "
                        f"by plan {part['plan_hash'][:12]} ({part['kind']}, `{part['file']}`) under the live "
                        "population's own config; this plan builds the pipeline change beside it, with the same edits")
    return lines


def key_rows(plan: Plan) -> list[tuple[str, str]]:
    n = plan.numbers
    d = n.documents
    return [
        ("Documents", " · ".join(f"{k} {num(getattr(d, k))}" for k in ("added", "edited", "removed", "unchanged", "bad"))),
        ("Chunks", f"{num(n.chunks_old)} → {num(n.chunks_new)} ({ratio(n.chunks_old, n.chunks_new)})"),
        ("Chunks reused", f"{num(n.chunks_reused)} ({pct(n.chunks_reused, n.chunks_new)} of new)"),
        ("Chunks to embed", num(n.chunks_to_embed)),
        ("Tokens to embed", f"{num(n.tokens_to_embed)} of {num(n.tokens_new)}"),
        *([("Re-chunking", rc)] if (rc := rechunk_line(plan.body["work"])) is not None else []),
        *([("Units", ul)] if (ul := units_line(plan.body["work"])) is not None else []),
        ("API spend", f"{usd(n.usd)} at ${n.usd_per_mtok:g} per million tokens"),
        ("Wall clock", f"{duration(n.hours)} at {num(n.tokens_per_minute)} tokens/min "
                       f"(rate source: {rate_note(plan.body['cost'])})"),
        *([("Index build", bl)] if (bl := build_line(plan.body["cost"])) is not None else []),
        ("Vectors", f"{num(n.vectors_old)} → {num(n.vectors_new)} ({ratio(n.vectors_old, n.vectors_new)})"),
        ("Peak vectors", f"{num(n.peak_vectors)} ({peak_note(plan)})"),
    ]


def units_line(w: dict) -> str | None:
    """One line on vector.compose: units (``work.units``), or None when chunks are embedded whole."""
    u = w.get("units")
    if not u:
        return None
    return (f"composed from units ({u['unit']}): {num(u['chunks_composed'])} chunks to embed hold {num(u['units'])} units, "
            f"{num(u['units_reused'])} stored, {num(u['units_to_embed'])} to embed ({num(u['tokens_to_embed'])} tokens; "
            f"+{u['unit_part_bytes_added'] / 1e6:.2f} MB of unit parts in the state store)")


def rechunk_line(w: dict) -> str | None:
    """One line on sticky re-chunking (``work.rechunk``), or None when edited documents are cut statelessly."""
    rc = w.get("rechunk") or {}
    if rc.get("mode") != "sticky" or not (rc["documents"] or rc["without_previous_texts"]):
        return None
    d = rc["drift"]
    n = rc["documents"]
    line = (f"sticky re-chunking: {num(n)} edited document{'' if n == 1 else 's'} kept {num(rc['kept_chunks'])} of "
            f"{'its' if n == 1 else 'their'} {num(rc['previous_chunks'])} previous chunks; drift control re-cut "
            f"{num(rc['recut_documents'])}")
    if d["checked_documents"]:
        line += (f" (drift W1/median mean {d['distance_mean']:.3f}, max {d['distance_max']:.3f} of {d['max_drift']:g}; "
                 f"out of bounds mean {d['out_of_bounds_mean']:.1%}, max {d['out_of_bounds_max']:.1%})")
    if rc["without_previous_texts"]:
        line += f"; {num(rc['without_previous_texts'])} cut statelessly (previous chunk texts not stored)"
    return line


def peak_note(plan: Plan) -> str:
    if plan.kind.pipeline_scoped:
        return "at cutover, old and new populations both live"
    if plan.kind == ChangeKind.INITIAL:
        return "the new population"
    if plan.kind == ChangeKind.NONE:
        return "nothing to build"
    if plan.kind == ChangeKind.PAYLOAD:
        return "in place: payloads are overwritten, no point is added"
    return "in place: new points are written before stale ones are deleted"


def footprint_rows(plan: Plan) -> list[tuple[str, str, str, str]]:
    c = plan.body["cost"]
    fp = c["footprint"]
    return [
        ("Vectors", num(c["vectors_old"]), num(c["vectors_new"]), num(c["peak_vectors"])),
        ("RAM", *(human_bytes(fp[k]["ram_bytes"]) for k in ("old", "new", "peak"))),
        ("Disk", *(human_bytes(fp[k]["disk_bytes"]) for k in ("old", "new", "peak"))),
    ]


def projection_rows(proj: Mapping[str, Any]) -> list[tuple[str, str, str, str]]:
    fmt = lambda f, v: human_bytes(v) if f == "payload_bytes" else num(v)  # noqa: E731
    return [
        (FIELD_LABELS.get(f, f), fmt(f, iv["estimate"]), fmt(f, iv["low"]), fmt(f, iv["high"]))
        for f, iv in sorted(proj["intervals"].items(), key=lambda kv: list(FIELD_LABELS).index(kv[0])
                            if kv[0] in FIELD_LABELS else len(FIELD_LABELS))
    ]


def tail_line(plan: Plan) -> str:
    s = plan.body["sensitivity"]
    return (f"{num(s['tail_documents'])} documents longer than {num(s['tail_tokens'])} tokens produce "
            f"{num(s['tail_chunks'])} chunks: {100 * s['tail_chunk_share']:.1f} % of the new population")


def what_if_rows(plan: Plan) -> list[tuple[str, ...]]:
    return [
        (r["chunker"] + (" (current)" if r.get("current") else ""), num(r["chunks"]), num(r["tokens_full_reembed"]),
         usd(r["usd"]), duration(r["hours"]), r["method"])
        for r in plan.body["sensitivity"].get("what_if", [])
    ]


def plan_title(plan: Plan) -> str:
    return f"Reindex plan: {plan.index} · {plan.kind} · {plan.plan_hash[:12]}"


def baseline_line(plan: Plan) -> str:
    base = plan.body["inputs"]["baseline"]
    kind = base.get("kind")
    if kind == "live":
        return f"live population `{base.get('collection')}`"
    if kind == "explicit":
        return f"explicit baseline over `{base.get('corpus')}`"
    return "nothing (initial build)"


def forecast_rows(plan: Plan) -> list[tuple[str, str, str, str, str]]:
    """(metric, old, new, new − old [95 % CI], verdict) rows of the plan's forecast (none without one)."""
    f = plan.body.get("forecast") or {}
    return [(name, f"{m['old']:.3f}", f"{m['new']:.3f}", f"{m['diff']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}]",
             m.get("verdict") or "") for name, m in f.get("metrics", {}).items()]


def forecast_serving_line(sv: dict[str, Any]) -> str:
    """The forecast's recommendation for a model change (reindex now | bridge | cascade | stay) with its numbers."""
    nums = []
    for name, n in (sv.get("numbers") or {}).items():
        if "diff" in n:
            kept = f", keeps {n['retained']:.0%}" if "retained" in n else ""
            nums.append(f"{name} {n['diff']:+.3f} [{n['low']:+.3f}, {n['high']:+.3f}]{kept}")
        else:
            nums.append(f"{name} not evaluated ({n.get('why') or 'refused'})")
    return f"{sv['recommendation']} — {sv['reason']}" + (f" ({sv['metric']}: {'; '.join(nums)})" if nums else "") \
        + readers_words(sv.get("readers") or {})


def readers_words(readers: dict[str, Any]) -> str:
    """What readers will pay per query in each mode, before the build ("; readers will pay ~N embeddings / ~M ms per
    query: ..."), measured on the forecast's sample."""
    def one(c: dict[str, Any]) -> str:  # every embedding a query makes: its own, and a cascade's candidates
        return f"~{c.get('embeddings_per_query', c['embedded_per_query']):g} embeddings / ~{c['reader_ms_p95']:,.0f} ms"

    said = []
    if "old" in readers:
        said.append(f"old {one(readers['old'])} (natively, now)")
    if "bridge" in readers:
        said.append(f"bridge {one(readers['bridge'])}")
    if "cascade" in readers:
        c = readers["cascade"]
        said.append(f"cascade {one(c['at_start'])} at the start of the build, {one(c['built'])} once it is built")
    return f"; readers will pay per query (p95): {', '.join(said)}" if said else ""


def forecast_facts(plan: Plan) -> list[str]:
    """The forecast's verdict, how its sample was drawn, what it cost and how the two models compare."""
    f = plan.body.get("forecast")
    if not f:
        return []
    s, c, q = f["sample"], f["cost"], f["queries"]
    out = [f"Verdict: **{f['verdict']}** (measured on a sample before paying for the build, exactly as the cutover "
           "will evaluate the whole)",
           f"Sample: {num(f['sample_documents'])} of {num(s['corpus_documents'])} documents ({num(s['stratified'])} "
           f"drawn by length, {num(s['query_documents'])} more that the queries point at; seed {s['seed']}); "
           f"queries: {q['source']} ({num(q['count'])})",
           f"Its own cost: {num(c['tokens'])} tokens embedded ({num(c['embedded_chunks'])} of {num(c['chunks'])} "
           f"chunks), {c['seconds']:.1f} s, {c['cpu_seconds']:.1f} CPU-s of its process"
           + (f" (projected {c['projected_cpu_seconds']:.1f} before it ran)" if "projected_cpu_seconds" in c else "")
           + (f"; vectors also reused from {', '.join(c['retained_populations'])}"
              if c.get("retained_populations") else "")]
    a = f.get("agreement")
    if a:
        cos = f"; mean cosine of their vectors {a['mean_cosine']:.4f}" if "mean_cosine" in a else \
            "; different vector spaces (compared by the overlap of their top-k)"
        out.append(f"Models on {num(a['chunks'])} sampled chunks: old {a['old_tokens_per_cpu_second']:,.0f}, new "
                   f"{a['new_tokens_per_cpu_second']:,.0f} tokens per CPU-second (×{a['speed_ratio']:.2f}){cos}")
    if f.get("serving"):
        out.append(f"Serving during the build: **{f['serving']['recommendation']}** — "
                   + forecast_serving_line(f["serving"]).split(" — ", 1)[1])
    k = f.get("k", 10)
    out.append(f"Top-{k} overlap of the two sides {f.get(f'overlap_at_{k}', 0):.3f}, rank-biased overlap "
               f"{f.get('rbo', 0):.3f}")
    if f.get("power"):
        shown = "; ".join(f"{m}: ±{x['half_width']:.3f} on {num(x['queries'])} queries, {x['outcome']}"
                          + (f" (needs ~{num(x['needed_queries'])})" if x.get("needed_queries") and
                             x["outcome"] == "cannot tell" else "") for m, x in f["power"].items())
        out.append(f"The cutover's gate on these queries: {shown}")
    if f.get("gate_outlook"):
        out.append(f"**The cutover's gate cannot decide**: {f['gate_outlook']}")
    return out
