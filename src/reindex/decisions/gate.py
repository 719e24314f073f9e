"""The gate's reading of the evidence (DESIGN.md invariants 15 and 19): which rule a cutover must pass and how each one
reads its interval, with the words a report says it in.

The change's verdict on the primary metric decides (``cutover.metric``, nDCG@k by default: :func:`evidence_rule`);
recall@k is a floor; every segment is judged as the whole is (:func:`segment_rules`); the index that will serve
readers is a rule (``index-recall``, ``latency``: :mod:`reindex.decisions.index_health`); identical populations pass
as identical (:func:`identical_populations`). A paired interval is read by :func:`judge`: ``fail``, ``pass``, or
``cannot tell`` when it is wider than what the rule must detect, with the number of queries that would decide it
(:func:`power`): never evidence either way."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Mapping

from reindex.adapters.stores.objects import ObjectStore
from reindex.books.manifests import count_chunk_manifest_rows, read_chunk_manifest_columns, read_population
from reindex.decisions.evaluation import gate_metrics, metric_verdict
from reindex.decisions.index_health import latency_ratio, side_health

__all__ = [
    "ADVICE", "LATENCY_SLACK_MS", "POWER_ADVICE", "PRIMARY_METRICS", "Rule", "add_latency", "compare_forecast",
    "evidence_rule", "gate", "gate_bounds", "gate_outlook", "identical_populations", "index_recall_rule", "judge",
    "latency_rule", "measure_health", "metric_label", "power", "primary_metric", "segment_rules", "verdict_words",
]


#: The metrics ``cutover.metric`` may name, as the per-query metric at depth k each one is.
PRIMARY_METRICS = {"ndcg": "ndcg_at_{k}", "recall": "recall_at_{k}", "mrr": "mrr", "passage_mrr": "passage_mrr"}


def primary_metric(name: str, k: int) -> str:
    """The per-query metric ``cutover.metric`` names (``ndcg`` → ``ndcg_at_10`` at k = 10)."""
    return PRIMARY_METRICS[name].format(k=k)


def metric_label(metric: str) -> str:
    """How a report names a metric: ``ndcg_at_10`` → nDCG@10, ``passage_mrr`` → passage MRR."""
    base, _, at = metric.partition("_at_")
    names = {"ndcg": "nDCG", "recall": "recall", "mrr": "MRR", "passage_mrr": "passage MRR",
             "passage_hit": "passage hit", "evidence_recall": "evidence recall"}
    return names.get(base, base.replace("_", " ")) + (f"@{at}" if at else "")


def power(diff: dict, bound: float) -> dict:
    """What a paired interval can tell about the claim "new − old ≥ ``bound``": its ``half_width`` on the ``queries``
    it has, and ``needed_queries``, how many queries like these would narrow it enough for its lower end to clear
    the bound (the half-width shrinks as 1/√n), assuming the difference is what it measured, or 0 if it measured a
    loss. None when no number of such queries can (they all scored the same: no spread to shrink; or the bound asks
    for a gain the estimate does not show)."""
    n = diff.get("n")
    half = (diff["high"] - diff["low"]) / 2 if n != 0 else 0.0
    target = max(diff["mean"], 0.0) - bound
    needed = math.ceil(n * (half / target) ** 2) if n and half > 0 and target > 0 else None
    return {"half_width": round(half, 6), "needed_queries": needed, "queries": n}


#: What to do when a gate's queries cannot decide.
POWER_ADVICE = ("give labelled queries (--queries, or cutover.queries in reindex.yaml for unattended syncs) or raise "
                "cutover.probes")


def gate_outlook(agg: Mapping[str, Any], policy: Any, k: int) -> dict[str, Any]:
    """What the gate's rules can tell from these queries, per gated metric (the primary one, ``cutover.metric``, that
    decides; recall@k, the floor): ``{metric: {"half_width", "needed_queries", "queries", "bound", "outcome"}}``
    (:func:`judge` of its interval against the bound it is held to), and a ``line`` for people when a rule cannot
    decide: the half-width its queries reach, how many it would need, and what to do."""
    primary = primary_metric(getattr(policy, "metric", "ndcg"), k)
    rules = ((primary, getattr(policy, "min_delta", -0.02), True),
             (f"recall_at_{k}", getattr(policy, "min_recall_delta", -0.02), False))
    out: dict[str, Any] = {}
    for m, bound, decides in rules:
        if f"{m}_diff" in agg and m not in out:
            j = judge(agg[f"{m}_diff"], agg.get(f"{m}_ceiling", False), bound, worse_fails=decides, blind=decides)
            out[m] = {"half_width": j["half_width"], "needed_queries": j["needed_queries"], "queries": j["queries"],
                      "bound": bound, "outcome": j["outcome"]}
    unsure = [(m, x) for m, x in out.items() if x["outcome"] == "cannot tell"]
    lines = []
    for m, x in unsure:
        need = (f"about {x['needed_queries']:,} such queries would decide it" if x["needed_queries"] else
                "no number of such queries would decide it (they score alike on both sides)")
        lines.append(f"cannot tell on {metric_label(m)}: its {x['queries']:,} queries reach ±{x['half_width']:.3f}, "
                     f"wider than the rule's bound {x['bound']:+.3f} allows; {need}")
    if lines:
        return {"metrics": out, "line": "; ".join(lines) + f": {POWER_ADVICE}"}
    return {"metrics": out, "line": None}


def judge(diff: dict, ceiling: bool, bound: float, *, worse_fails: bool, blind: bool = False) -> dict:
    """One gate rule's reading of a paired interval of new − old for the claim "at least ``bound``":
    ``{"outcome": "pass" | "fail" | "cannot tell", "verdict", "half_width", "needed_queries", "queries"}``.

    ``fail`` when the interval lies below the bound, or (``worse_fails``: a rule on the change's verdict) when the
    change is `worse` (its upper end below 0); ``pass`` when its lower end clears the bound; otherwise ``cannot
    tell``: the interval is wider than what the rule must detect, which is never evidence either way
    (``needed_queries`` says how many queries would do). With ``blind`` (the rule that decides) queries that cannot
    see a difference at all (every one at the ceiling on both sides, or a single-point interval:
    :func:`metric_verdict`) are ``cannot tell`` too; otherwise (a floor, a segment) the point they give is read."""
    out = {"verdict": metric_verdict({"n": None, **diff}, ceiling), **power(diff, bound)}
    low, high, n = diff["low"], diff["high"], diff.get("n")
    if n == 0:
        return {**out, "outcome": "cannot tell"}
    if high < (max(bound, 0.0) if worse_fails else bound):
        return {**out, "outcome": "fail"}
    if blind and (ceiling or low == high):
        return {**out, "outcome": "cannot tell"}
    return {**out, "outcome": "pass" if low >= bound else "cannot tell"}


def verdict_words(agg: dict) -> str:
    """The overall verdict in words that match the numbers: which metrics moved which way, and whether at 95 %
    (``worse on every metric (not significant at 95 %)``, not a bare "no measurable difference" under a failed gate)."""
    per: dict[str, str] = agg.get("metrics", {})
    v = agg.get("verdict", "cannot tell")
    if v == "cannot tell" or not per:
        return "cannot tell: the queries cannot see a difference between old and new (every metric at the ceiling " \
               "or a single-point interval)"
    means = {m: agg[f"{m}_diff"]["mean"] for m, mv in per.items() if mv != "cannot tell" and f"{m}_diff" in agg}
    names = lambda ms: ", ".join(metric_label(m) for m in ms)  # noqa: E731
    worse = [m for m, mv in per.items() if mv == "worse"]
    better = [m for m, mv in per.items() if mv == "better"]
    down = [m for m, x in means.items() if x < 0]
    up = [m for m, x in means.items() if x > 0]
    if v == "worse":
        also = f"; better on {names(better)}" if better else ""
        return f"worse: significantly lower {names(worse)} (95 %){also}"
    if v == "better":
        return f"better: significantly higher {names(better)} (95 %)" + (
            f"; lower {names(down)} (not significant)" if down else "")
    if down and not up:
        every = "every metric" if len(down) == len(means) else f"{len(down)} of {len(means)} metrics, none higher"
        return f"worse on {every} (not significant at 95 %)"
    if up and not down:
        every = "every metric" if len(up) == len(means) else f"{len(up)} of {len(means)} metrics, none lower"
        return f"better on {every} (not significant at 95 %)"
    if not up and not down:
        return "no measurable difference (the same mean on every metric)"
    return f"no measurable difference ({len(up)} metrics higher, {len(down)} lower, none significant at 95 %)"


def gate_bounds(policy: Any, k: int) -> dict[str, float]:
    """The bound the gate holds each metric's lower end to: recall@k its floor (``cutover.min_recall_delta``), every
    other metric ``cutover.min_delta`` (the primary metric's)."""
    floor, delta = getattr(policy, "min_recall_delta", -0.02), getattr(policy, "min_delta", -0.02)
    return {m: floor if m == f"recall_at_{k}" else delta for m in gate_metrics(k)}


def compare_forecast(forecast: Mapping[str, Any], agg: Mapping[str, Any], primary: str) -> dict | None:
    """The plan's forecast beside what the cutover measured: per metric both (difference and interval), whether the
    forecast's interval held the full figure, both verdicts, and one line (``the sample predicted nDCG@10 −0.047
    [−0.09, −0.01]; the full change measured −0.047 [−0.07, −0.02]``). None when the plan has no forecast."""
    if not forecast:
        return None
    metrics = {}
    for m, f in (forecast.get("metrics") or {}).items():
        d = agg.get(f"{m}_diff")
        if d is None:
            continue
        metrics[m] = {"predicted": {"diff": f["diff"], "low": f["low"], "high": f["high"]},
                      "measured": {"diff": round(d["mean"], 6), "low": round(d["low"], 6), "high": round(d["high"], 6)},
                      "held": f["low"] <= d["mean"] <= f["high"]}
    shown = primary if primary in metrics else next(iter(metrics), None)
    line = f"the forecast said {forecast.get('verdict', 'cannot tell')}, the full change measured " \
           f"{agg.get('verdict', 'cannot tell')}"
    if shown is not None:
        p, m = metrics[shown]["predicted"], metrics[shown]["measured"]
        line = (f"the sample predicted {metric_label(shown)} {p['diff']:+.3f} [{p['low']:+.3f}, {p['high']:+.3f}] "
                f"({forecast.get('verdict', 'cannot tell')} on {forecast.get('sample_documents', '?')} documents); "
                f"the full change measured {m['diff']:+.3f} [{m['low']:+.3f}, {m['high']:+.3f}] "
                f"({agg.get('verdict', 'cannot tell')})")
    return {"verdict": forecast.get("verdict"), "measured_verdict": agg.get("verdict"), "metric": shown,
            "metrics": metrics, "line": line}


@dataclass(frozen=True, slots=True)
class Rule:
    """One gate rule: its name, whether it let the cutover through, one line saying why, its ``outcome`` (``pass``,
    ``fail`` or ``cannot tell``: a rule whose evidence cannot decide; it passes only under ``cutover.cannot_tell:
    pass``) and, for a rule read from an interval, its ``power`` (``half_width``, ``needed_queries``, ``queries``)."""

    name: str
    passed: bool
    detail: str
    outcome: str = ""
    power: dict | None = None

    def as_dict(self) -> dict:
        out = {"rule": self.name, "passed": self.passed, "detail": self.detail}
        if self.outcome:
            out["outcome"] = self.outcome
        if self.power is not None:
            out["power"] = self.power
        return out


def _pol(policy: Any, name: str, default: Any) -> Any:
    return getattr(policy, name, default)


def gate(policy: Any, evaluation: dict | None, *, shadow_points: int, planned_chunks: int, failures: int,
         k: int, health: dict | None = None, identical: str | None = None) -> list[Rule]:
    """Pass/fail per rule of the cutover policy (config ``cutover``), in order: the shadow is complete (point count,
    no failed shards); its index serves (``index-recall``, ``latency``: from ``health``, :func:`measure_health`);
    recall@k does not fall below its floor (or, without labels, the rankings overlap); the change's verdict on the
    primary metric decides (``evidence``: :func:`evidence_rule`); every segment is judged as the whole is.
    ``identical``: why the two populations answer alike by construction (:func:`identical_populations`): they pass
    as identical, whatever queries at the ceiling would say."""
    rules = []
    if policy.require_exact_count:
        rules.append(Rule("point-count", shadow_points == planned_chunks,
                          f"shadow holds {shadow_points:,} points, its chunk manifest has {planned_chunks:,} chunks"))
    rules.append(Rule("no-failed-shards", failures == 0, f"{failures} failed shards or documents"))
    if health is not None:
        rules.append(index_recall_rule(health, policy))
        latency = latency_rule(health, policy)
        if latency is not None:
            rules.append(latency)
    if evaluation is not None:
        agg = evaluation["aggregate"]
        diff = agg.get(f"recall_at_{k}_diff")
        if diff is not None:
            rules.append(_floor_rule(diff, policy, k))
        else:
            ov = agg.get(f"overlap_at_{k}", 0.0)
            rules.append(Rule(f"overlap@{k}", ov >= policy.min_overlap,
                              f"mean document overlap@{k} = {ov:.3f}; must be ≥ {policy.min_overlap:.3f} (no labels)"))
        if identical is not None:
            rules.append(Rule("evidence", True, f"identical: {identical}; they pass as identical", "pass"))
            return rules
        if "verdict" in agg:
            rules.append(evidence_rule(agg, policy, k))
        rules.extend(segment_rules(evaluation.get("segments") or {}, policy, k))
    return rules


def _floor_rule(diff: dict, policy: Any, k: int) -> Rule:
    """recall@k as a floor: its lower bound must be at least ``min_recall_delta``; an interval that straddles the
    bound is ``cannot tell`` (with the queries it would need), never a pass."""
    bound = policy.min_recall_delta
    j = judge(diff, False, bound, worse_fails=False)
    head = (f"recall@{k} new − old = {diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}]; "
            f"lower bound must be ≥ {bound:+.3f}")
    if j["outcome"] != "cannot tell":
        return Rule(f"recall@{k}", j["outcome"] == "pass", head, j["outcome"], _power(j))
    allowed = _pol(policy, "cannot_tell", "fail") == "pass"
    return Rule(f"recall@{k}", allowed, f"cannot tell: {head} — {_too_wide(j)}" + _let_through(allowed),
                "cannot tell", _power(j))


def _power(j: dict) -> dict:
    return {"half_width": j["half_width"], "needed_queries": j["needed_queries"], "queries": j["queries"]}


ADVICE = POWER_ADVICE


def _too_wide(j: dict) -> str:
    """Why an interval cannot decide, with the number of queries that would (or why none would)."""
    n = j["queries"]
    if j["needed_queries"] is None:
        return ("no number of queries like these can decide (they score alike on both sides, or the estimate itself "
                f"is below the bound): {ADVICE}")
    return (f"the interval (±{j['half_width']:.3f} on {n:,} queries) is wider than what the rule must detect: about "
            f"{j['needed_queries']:,} such queries would narrow it enough; {ADVICE}")


def _let_through(allowed: bool) -> str:
    return "; let through by cutover.cannot_tell: pass" if allowed else ""


def evidence_rule(agg: dict, policy: Any, k: int = 10) -> Rule:
    """The change's verdict decides, read on the primary metric (``cutover.metric``, nDCG@k by default, its paired
    interval judged by :func:`reindex.decisions.evaluation.judge` against ``cutover.min_delta``): `worse` fails, a
    lower bound at least ``min_delta`` passes, an interval too wide to tell (or queries that cannot see a
    difference: every one at the ceiling, a single-point interval) is ``cannot tell``, which fails unless
    ``cutover.cannot_tell: pass``. A change `worse` on any other metric fails too: a worse verdict never passes
    without ``--force``. Without the primary metric (no labelled query gives it), the overall verdict decides."""
    per = ", ".join(f"{m} {v}" for m, v in agg.get("metrics", {}).items()) or "no labelled metric"
    words = verdict_words(agg)
    primary = primary_metric(_pol(policy, "metric", "ndcg"), k)
    bound = _pol(policy, "min_delta", -0.02)
    allowed = _pol(policy, "cannot_tell", "fail") == "pass"
    worse = [m for m, v in agg.get("metrics", {}).items() if v == "worse" and m != primary]
    if f"{primary}_diff" not in agg:
        v = agg["verdict"]
        if v == "worse":
            return Rule("evidence", False, f"verdict worse ({per}): a worse change never passes without --force", "fail")
        if v != "cannot tell":
            return Rule("evidence", True, f"verdict {v} ({per})", "pass")
        return Rule("evidence", allowed, f"verdict cannot tell ({per}): the queries cannot see a difference between "
                    f"old and new; {ADVICE}, or set cutover.cannot_tell: pass" + _let_through(allowed), "cannot tell")
    d = agg[f"{primary}_diff"]
    j = judge(d, agg.get(f"{primary}_ceiling", False), bound, worse_fails=True, blind=True)
    name = metric_label(primary)
    shown = f"{name} new − old = {d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] on {j['queries']:,} queries"
    if j["outcome"] == "fail":
        return Rule("evidence", False, f"verdict worse on {name} (cutover.metric): {shown}; a worse change never "
                    f"passes without --force ({words})", "fail", _power(j))
    if worse:
        return Rule("evidence", False, f"verdict worse ({', '.join(metric_label(m) for m in worse)} significantly "
                    f"lower; {shown}): a worse change never passes without --force", "fail", _power(j))
    if j["outcome"] == "pass":
        return Rule("evidence", True, f"verdict {j['verdict']} on {name} (cutover.metric): {shown}; lower bound ≥ "
                    f"{bound:+.3f} ({words})", "pass", _power(j))
    blind = j["verdict"] == "cannot tell"
    why = (f"verdict cannot tell on {name}: {shown}: every query scores alike on both sides (at the ceiling, or a "
           f"single-point interval): the queries cannot see a difference between old and new; {ADVICE}, or set "
           "cutover.cannot_tell: pass") if blind else (
        f"verdict cannot tell on {name}: {shown}; to show it is at least {bound:+.3f}, {_too_wide(j)}")
    return Rule("evidence", allowed, why + _let_through(allowed), "cannot tell", _power(j))


def segment_rules(segments: dict, policy: Any, k: int) -> list[Rule]:
    """One rule per field of ``cutover.segments``, each segment judged on the primary metric as the whole is
    (:func:`reindex.decisions.evaluation.judge` on its interval corrected for the number of segments by Holm,
    :func:`reindex.decisions.evaluation.segment_results`): a segment `worse` (or below ``min_delta``) fails the rule,
    one whose interval is too wide is ``cannot tell`` (failing unless ``cutover.cannot_tell: pass``), and the rule
    passes when every segment's corrected lower bound clears ``min_delta`` (a segment whose queries all score the
    same on both sides shows no loss: whether the queries can see a difference at all is the whole's rule,
    ``evidence``). A segment whose primary metric rises does not fail because one query left the top k. Segments
    without labelled queries are not checked."""
    metric = primary_metric(_pol(policy, "metric", "ndcg"), k)
    bound = _pol(policy, "min_delta", -0.02)
    allowed = _pol(policy, "cannot_tell", "fail") == "pass"
    label = metric_label(metric)
    m = len({(f, v) for f, vs in segments.items() for v, seg in vs.items() if metric in seg})
    rules = []
    for name, values in segments.items():
        judged = {v: (seg[metric], judge({"mean": seg[metric]["diff"], "low": seg[metric]["low"],
                                             "high": seg[metric]["high"], "n": seg[metric]["n"]},
                                            False, bound, worse_fails=True))
                  for v, seg in values.items() if metric in seg}
        if not judged:
            continue
        failed = [v for v, (_, j) in judged.items() if j["outcome"] == "fail"]
        unsure = [v for v, (_, j) in judged.items() if j["outcome"] == "cannot tell"]
        shown = failed or unsure or list(judged)
        detail = "; ".join(
            f"{name}={v}: {d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}] over {d['n']} queries"
            + (f" ({judged[v][1]['outcome']}" + (f", ~{judged[v][1]['needed_queries']:,} queries would tell)"
                                                  if judged[v][1]["needed_queries"] and v in unsure else ")")
               if v in failed or v in unsure else "")
            for v, (d, _) in ((v, judged[v]) for v in shown))
        where = lambda vs: ", ".join(f"{name}={v}" for v in vs)  # noqa: E731
        holm = f"(intervals corrected by Holm for {m} segments)"
        if failed:
            rules.append(Rule(f"{label} per {name}", False, f"worse or below {bound:+.3f} in {where(failed)} {holm}: "
                              f"{detail}", "fail"))
        elif unsure:
            rules.append(Rule(f"{label} per {name}", allowed, f"cannot tell in {where(unsure)}: the corrected interval "
                              f"is wider than what the rule must detect ({bound:+.3f}) {holm}: {detail}; {ADVICE}"
                              + _let_through(allowed), "cannot tell"))
        else:
            rules.append(Rule(f"{label} per {name}", True, f"every lower bound ≥ {bound:+.3f} {holm}: {detail}", "pass"))
    return rules


def index_recall_rule(health: dict, policy: Any) -> Rule:
    """The shadow's search index serves: fully built (nothing left to index, or the rest searched exactly) and its
    ANN recall@10 against exact search at least ``cutover.min_index_recall``."""
    new, old = health["new"], health.get("old")
    floor = _pol(policy, "min_index_recall", 0.95)
    r = new.get("recall_at_10_vs_exact")
    was = (f" (live {old['collection']}: {old['recall_at_10_vs_exact']:.3f})"
           if old and old.get("recall_at_10_vs_exact") is not None else "")
    if not new["ready"]:
        return Rule("index-recall", False, f"{new['collection']} is not fully indexed: {new['detail']}", "fail")
    if r is None and new.get("exact_search") is False:
        return Rule("index-recall", True, f"{new['collection']}'s store offers no exact search to measure its index "
                    "against: recall not measured", "pass")
    if r is None:
        return Rule("index-recall", True, f"{new['collection']} holds no vector to sample: nothing to search", "pass")
    how = f"searched {new['searched']}: {new['detail']}"
    return Rule("index-recall", r >= floor,
                f"recall@10 of {new['collection']}'s index vs exact search {r:.3f} on {new['sampled']} stored vectors"
                f"{was}; must be ≥ {floor:.2f} ({how})", "pass" if r >= floor else "fail")


#: A p95 difference under this many milliseconds passes the latency rule whatever the ratio: below what a reader
#: notices, and within the timer noise of a shared machine.
LATENCY_SLACK_MS = 1.0


def latency_rule(health: dict, policy: Any) -> Rule | None:
    """What readers will pay: the shadow's query latency p95 on the gate's queries ÷ the live population's must be
    at most ``cutover.max_latency_ratio`` (a difference under :data:`LATENCY_SLACK_MS` passes). None for a first
    build (nothing to compare with)."""
    new, old = health["new"], health.get("old")
    if not old or new.get("latency_ms_p95") is None or old.get("latency_ms_p95") is None:
        return None
    limit = _pol(policy, "max_latency_ratio", 2.0)
    ratio = latency_ratio(new["latency_ms_p95"], old["latency_ms_p95"])
    ok = ratio <= limit or new["latency_ms_p95"] - old["latency_ms_p95"] < LATENCY_SLACK_MS
    return Rule("latency", ok,
                f"query latency p95 {old['latency_ms_p95']:.2f} → {new['latency_ms_p95']:.2f} ms (p50 "
                f"{old['latency_ms_p50']:.2f} → {new['latency_ms_p50']:.2f}) on the gate's queries: ×{ratio:.2f}; must "
                f"be ≤ ×{limit:g} (or under {LATENCY_SLACK_MS:g} ms more)", "pass" if ok else "fail")


def measure_health(store: Any, live: str | None, shadow: str, policy: Any) -> dict:
    """Index health of both populations: the shadow waited for while a server indexes it (up to
    ``cutover.index_wait``), then each side's index state and recall@10 against exact search
    (:mod:`reindex.decisions.index_health`); latency is added from the evaluation (:func:`add_latency`)."""
    t = time.perf_counter()
    wait = getattr(policy, "index_wait_seconds", 0.0)
    out: dict[str, Any] = {"new": side_health(store, shadow, wait_s=wait)}
    out["old"] = side_health(store, live) if live is not None else None
    out["seconds"] = round(time.perf_counter() - t, 3)
    return out


def add_latency(health: dict, evaluation: dict | None, alone: dict | None) -> None:
    """Each side's query latency p50/p95 on the gate's queries (the evaluation's, or a first build's own)."""
    if evaluation is not None:
        agg = evaluation["aggregate"]
        for side in ("old", "new"):
            if health.get(side) is not None and f"latency_{side}_p95_ms" in agg:
                health[side]["latency_ms_p50"] = round(agg[f"latency_{side}_p50_ms"], 3)
                health[side]["latency_ms_p95"] = round(agg[f"latency_{side}_p95_ms"], 3)
    elif alone is not None and "latency_p95_ms" in alone["aggregate"]:
        health["new"]["latency_ms_p50"] = round(alone["aggregate"]["latency_p50_ms"], 3)
        health["new"]["latency_ms_p95"] = round(alone["aggregate"]["latency_p95_ms"], 3)


def identical_populations(state: ObjectStore, index: str, old: str, new: str) -> str | None:
    """Why ``old`` and ``new`` answer every query alike by construction, or None: the same query side (their recorded
    vector halves, query prefix included, are equal) and the same chunks (equal multisets of (document, fingerprint):
    the vector half is inside the fingerprint, so the same vectors). Nothing is embedded differently: a byte-identical
    A/A. Reads the two chunk manifests only when the counts and the query sides agree."""
    a, b = read_population(state, index, old), read_population(state, index, new)
    if a is None or b is None or a.config.vector != b.config.vector:  # query_prefix included
        return None
    n = count_chunk_manifest_rows(state, index, old)
    if n != count_chunk_manifest_rows(state, index, new):
        return None

    def chunks(collection: str) -> list[tuple[str, str]]:
        rows: list[tuple[str, str]] = []
        for cols in read_chunk_manifest_columns(state, index, collection, ["doc_id", "fingerprint"]):
            rows.extend(zip(cols["doc_id"], cols["fingerprint"]))
        return sorted(rows)

    if chunks(old) != chunks(new):
        return None
    return (f"{old} and {new} hold the same {n:,} chunks with the same vectors (equal fingerprints) and embed "
            "queries with the same vector half: nothing is embedded differently")


