"""Plan reports: Markdown numbers, strict HTML, one data mark per charted point, no external resources."""

from __future__ import annotations

import re
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from reindex.planner import Plan, seal, write_plan
from reindex.reports import plan_html, plan_markdown, write_reports

BUCKETS = ["0-127", "128-255", "256-511", "512-1023", "1024-2047", "2048-4095", "4096-8191", "8192-16383", "16384+"]
GIB = 1024**3


def _body(kind: str = "pipeline-scoped/text", **over: Any) -> dict[str, Any]:
    """Seed 001's re-chunk at corpus scale: 8 M documents, 512 → 256 tokens with 20 % overlap."""
    body: dict[str, Any] = {
        "schema": "reindex/plan/v1",
        "created_at": "2026-05-04T10:00:00+00:00",
        "index": "products",
        "kind": kind,
        "documents_changed": True,
        "explanation": [
            "text.chunker.size: 512 → 256 (text half: every document is recut)",
            "text.chunker.overlap: 0.1 → 0.2 (text half: every document is recut)",
        ],
        "changes": [],
        "identity": {"new": {}, "old": {}},
        "chunker": {"new": "sliding:size=256,overlap=0.2", "old": "sliding:size=512,overlap=0.1"},
        "inputs": {
            "config": {"path": "reindex.yaml", "digest": "c0ffee"},
            "baseline": {"kind": "live", "collection": "products__ab12cd34"},
            "corpus": {"uri": "s3://corpus/products/", "digest": "d1", "documents": 8_000_000, "bytes": 10**11},
        },
        "config": {},
        "work": {
            "documents": {"total": 8_000_000, "added": 1_000, "edited": 40_000, "removed": 500,
                          "unchanged": 7_959_000, "bad": 2},
            "bad_documents": [{"doc_id": "p-17", "reason": "not valid UTF-8"},
                              {"doc_id": "p-99", "reason": "empty text"}],
            "chunks_old": 27_800_000,
            "chunks_new": 57_500_000,
            "chunks_reused": 2_400_000,
            "chunks_to_embed": 55_100_000,
            "tokens_new": 13_440_000_000,
            "tokens_to_embed": 13_440_000_000,
            "cross_document": {"chunks": 0, "tokens": 0},
            "affected_documents": [],
            "removed_documents": [f"p-r{i}" for i in range(3)],
        },
        "projection": None,
        "cost": {
            "usd": 268.8,
            "hours": 64.0,
            "usd_per_mtok": 0.02,
            "tokens_per_minute": 3_500_000.0,
            "rate_source": "config",
            "vectors_old": 27_800_000,
            "vectors_new": 57_500_000,
            "vectors_embedded": 55_100_000,
            "peak_vectors": 85_300_000,
            "footprint": {"old": {"ram_bytes": 60 * GIB, "disk_bytes": 95 * GIB},
                          "new": {"ram_bytes": 124 * GIB, "disk_bytes": 196 * GIB},
                          "peak": {"ram_bytes": 184 * GIB, "disk_bytes": 291 * GIB}},
            "formula": "ram = ceil(1.5 × vectors × dimension × bytes/component)",
        },
        "sensitivity": {
            "tail_tokens": 4000, "tail_documents": 560_000, "tail_chunks": 24_600_000, "tail_chunk_share": 0.427826,
            "what_if": [
                {"chunker": "sliding:size=256,overlap=0", "chunks": 47_900_000, "tokens_full_reembed": 12_340_000_000,
                 "usd": 246.8, "hours": 58.8, "method": "exact window arithmetic", "current": False},
                {"chunker": "sliding:size=256,overlap=0.2", "chunks": 57_500_000, "tokens_full_reembed": 13_440_000_000,
                 "usd": 268.8, "hours": 64.0, "method": "exact window arithmetic", "current": True},
            ],
        },
        "charts": {
            "length_buckets": BUCKETS,
            "doc_length_histogram": [900_000, 1_500_000, 1_600_000, 1_200_000, 800_000, 1_440_000, 420_000, 130_000, 10_000],
            "chunks_per_bucket": {"old": [2_400_000, 1_600_000, 23_800_000, 0, 0, 0, 0, 0, 0],
                                  "new": [2_400_000, 12_000_000, 43_100_000, 0, 0, 0, 0, 0, 0]},
            "tokens_to_embed_by_status": {"added": 1_200_000, "edited": 65_000_000, "unchanged": 13_373_800_000},
        },
        "approval": {"required": True, "reasons": ["pipeline-scoped/text plans need approval (approval.pipeline_scoped)"]},
        "timing": {"planning_seconds": 12.5, "documents_per_second": 640000.0},
    }
    for key, value in over.items():
        target, *path = key.split("__")
        node = body
        for part in [target, *path][:-1]:
            node = node[part]
        node[[target, *path][-1]] = value
    return body


def _document_scoped() -> Plan:
    b = _body("document-scoped", explanation=[], approval={"required": False, "reasons": []})
    ids = [f"p-{i:05d}" for i in range(120)]
    b["work"].update(affected_documents=ids, chunks_old=27_800_000, chunks_new=27_810_000, chunks_reused=27_700_000,
                     chunks_to_embed=63_000, tokens_new=12_350_000_000, tokens_to_embed=28_000_000, removed_documents=[])
    b["work"]["documents"].update(added=20, edited=100, removed=0, unchanged=7_999_880, bad=0)
    b["work"]["bad_documents"] = []
    b["cost"].update(usd=0.56, hours=0.1333, vectors_new=27_810_000, peak_vectors=27_863_000, rate_source="calibration")
    b["charts"]["tokens_to_embed_by_status"] = {"added": 3_000_000, "edited": 25_000_000, "unchanged": 0}
    return seal(b)


def _initial() -> Plan:
    b = _body("initial", explanation=[], approval={"required": False, "reasons": []})
    b["inputs"]["baseline"] = {"kind": "none"}
    b["work"].update(chunks_old=0, chunks_reused=0, chunks_to_embed=57_500_000, removed_documents=[], bad_documents=[])
    b["work"]["documents"].update(added=8_000_000, edited=0, removed=0, unchanged=0, bad=0)
    b["cost"].update(vectors_old=0, peak_vectors=57_500_000, rate_source="default")
    b["cost"]["footprint"]["old"] = {"ram_bytes": 0, "disk_bytes": 0}
    b["charts"]["chunks_per_bucket"]["old"] = [0] * len(BUCKETS)
    b["charts"]["tokens_to_embed_by_status"] = {"added": 13_440_000_000, "edited": 0, "unchanged": 0}
    return seal(b)


def _none() -> Plan:
    """Nothing to do; also every chart input zero, the worst case for division."""
    b = _body("none", explanation=[], documents_changed=False, approval={"required": False, "reasons": []})
    b["work"].update(chunks_old=0, chunks_new=0, chunks_reused=0, chunks_to_embed=0, tokens_new=0, tokens_to_embed=0,
                     removed_documents=[], bad_documents=[])
    b["work"]["documents"] = {"total": 0, "added": 0, "edited": 0, "removed": 0, "unchanged": 0, "bad": 0}
    b["cost"].update(usd=0.0, hours=0.0, vectors_old=0, vectors_new=0, vectors_embedded=0, peak_vectors=0)
    b["cost"]["footprint"] = {k: {"ram_bytes": 0, "disk_bytes": 0} for k in ("old", "new", "peak")}
    b["sensitivity"].update(tail_documents=0, tail_chunks=0, tail_chunk_share=0.0, what_if=[])
    b["charts"].update(doc_length_histogram=[0] * 9, chunks_per_bucket={"old": [0] * 9, "new": [0] * 9},
                       tokens_to_embed_by_status={"added": 0, "edited": 0, "unchanged": 0})
    return seal(b)


def _sampled() -> Plan:
    b = _body()
    b["charts"]["tokens_to_embed_by_status"] = {"added": 0, "edited": 0, "unchanged": 0}  # sampled docs aren't broken down
    b["projection"] = {
        "sample": 400, "population": 8_000_000, "seed": 7, "strata": [], "method": "length-stratified sample",
        "intervals": {
            "chunks_new": {"estimate": 57_500_000.0, "low": 55_912_345.6, "high": 59_087_654.4},
            "tokens_to_embed": {"estimate": 13_440_000_000.0, "low": 13_100_000_000.0, "high": 13_790_000_000.0},
            "payload_bytes": {"estimate": 5 * GIB, "low": 4.5 * GIB, "high": 5.5 * GIB},
        },
    }
    return seal(b)


# --------------------------------------------------------------------------------------------
# A strict HTML checker
# --------------------------------------------------------------------------------------------

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class StrictHTML(HTMLParser):
    """Balanced tags for non-void elements; per chart figure: its data-points and its mark elements."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.figures: list[dict[str, Any]] = []
        self.resources: list[str] = []

    def _attrs(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        for name in ("src", "href", "xlink:href"):
            if a.get(name):
                self.resources.append(a[name] or "")
        if tag == "figure" and "chart" in (a.get("class") or "").split():
            self.figures.append({"name": a.get("data-chart"), "points": int(a.get("data-points") or -1),
                                 "marks": 0, "svg": 0, "text": "", "depth": len(self.stack)})
        elif self.figures and self._in_figure() and "mark" in (a.get("class") or "").split():
            if tag in ("rect", "circle", "path"):
                self.figures[-1]["marks"] += 1
            else:
                self.errors.append(f"mark on a <{tag}>")
        if tag == "svg" and self.figures and self._in_figure():
            self.figures[-1]["svg"] += 1

    def _in_figure(self) -> bool:
        return "figure" in self.stack[self.figures[-1]["depth"]:]

    def handle_starttag(self, tag, attrs):
        self._attrs(tag, attrs)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self._attrs(tag, attrs)

    def handle_endtag(self, tag):
        if tag in VOID:
            self.errors.append(f"end tag for void element </{tag}>")
        elif not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else 'nothing'}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        if self.figures and self._in_figure():
            self.figures[-1]["text"] += data


def _check(page: str) -> StrictHTML:
    p = StrictHTML()
    p.feed(page)
    p.close()
    assert p.errors == [], p.errors
    assert p.stack == [], f"unclosed: {p.stack}"
    assert not [r for r in p.resources if re.match(r"\s*(https?:)?//", r)], p.resources
    assert "<script" not in page.lower() and "@import" not in page and "url(" not in page
    return p


CHARTS = ["population", "token-sources", "chunks-per-bucket", "doc-length"]


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def test_markdown_shows_the_numbers_a_manager_must_see():
    plan = seal(_body())
    md = plan_markdown(plan)
    assert md.startswith(f"# Reindex plan: products · pipeline-scoped/text · {plan.plan_hash[:12]}\n")
    for text in [
        "- text.chunker.size: 512 → 256 (text half: every document is recut)",
        "- 1,000 documents added, 40,000 edited, 500 removed",
        "| Documents | added 1,000 · edited 40,000 · removed 500 · unchanged 7,959,000 · bad 2 |",
        "| Chunks | 27,800,000 → 57,500,000 (×2.07) |",
        "| Chunks reused | 2,400,000 (4.2 % of new) |",
        "| Tokens to embed | 13,440,000,000 of 13,440,000,000 |",
        "| API spend | $268.80 at $0.02 per million tokens |",
        "| Wall clock | 64.0 h (2.7 days) at 3,500,000 tokens/min (rate source: from the config",
        "| Vectors | 27,800,000 → 57,500,000 (×2.07) |",
        "| Peak vectors | 85,300,000 (at cutover, old and new populations both live) |",
        "| RAM | 60.0 GiB | 124.0 GiB | 184.0 GiB |",
        "| Disk | 95.0 GiB | 196.0 GiB | 291.0 GiB |",
        "560,000 documents longer than 4,000 tokens produce 24,600,000 chunks: 42.8 % of the new population",
        "| sliding:size=256,overlap=0.2 (current) | 57,500,000 | 13,440,000,000 | $268.80 | 64.0 h (2.7 days) |",
        "**Required.**",
        "- pipeline-scoped/text plans need approval (approval.pipeline_scoped)",
        "## Removed documents (3)",
        "## Bad documents (2)",
        "- `p-17`: not valid UTF-8",
    ]:
        assert text in md, text
    assert "Affected documents" not in md and "Projection" not in md


def test_markdown_document_scoped_lists_affected_ids_capped():
    md = plan_markdown(_document_scoped())
    assert "- 20 documents added, 100 edited, 0 removed" in md
    assert "## Affected documents (120)" in md
    assert "- `p-00049`" in md and "p-00050" not in md
    assert "- … and 70 more" in md
    assert "| API spend | $0.56 at $0.02 per million tokens |" in md
    assert "| Wall clock | 8 min at 3,500,000 tokens/min (rate source: measured by `reindex calibrate`) |" in md
    assert "| Peak vectors | 27,863,000 (in place: new points are written before stale ones are deleted) |" in md
    assert "Required." not in md and "Not required." in md


def test_markdown_initial_none_and_sampled():
    md = plan_markdown(_initial())
    assert "- Initial build: 8,000,000 documents, no live population yet" in md
    assert "| Chunks | 0 → 57,500,000 (new) |" in md
    assert "default assumption" in md
    md = plan_markdown(_none())
    assert "| Chunks | 0 → 0 (—) |" in md and "Nothing changes" in md and "| API spend | $0.00 at" in md and "| Wall clock | 0 s at" in md
    assert "| RAM | 0 B | 0 B | 0 B |" in md and "(— of new)" in md
    md = plan_markdown(_sampled())
    assert "## Projection (sampled)" in md
    assert "Sample of 400 of 8,000,000 documents that needed chunking, seed 7" in md
    assert "| chunks (new population) | 57,500,000 | 55,912,346 | 59,087,654 |" in md
    assert "| payload bytes (new) | 5.0 GiB | 4.5 GiB | 5.5 GiB |" in md


def test_markdown_escapes_table_pipes_and_backticks_in_ids():
    b = _body()
    b["work"]["bad_documents"] = [{"doc_id": "a`b", "reason": "x"}]
    b["explanation"] = ["source.uri: a|b → c (operational: no re-embedding)"]
    md = plan_markdown(seal(b))
    assert "- `` a`b ``: x" in md


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------


def test_html_pipeline_scoped_every_chart_has_its_marks():
    plan = seal(_body())
    page = plan_html(plan)
    p = _check(page)
    assert [f["name"] for f in p.figures] == CHARTS
    for f in p.figures:
        assert f["points"] > 0 and f["svg"] == 1, f
        assert f["marks"] == f["points"], f
    pts = {f["name"]: f["points"] for f in p.figures}
    assert pts["doc-length"] == 9  # every bucket has documents
    assert pts["chunks-per-bucket"] == 6  # the nonzero old and new bars
    assert pts["token-sources"] == 5  # added, edited, recut; reused, embedded
    assert pts["population"] == 3  # start, peak at cutover, after retirement
    pop = next(f for f in p.figures if f["name"] == "population")
    assert "peak 85.3 M vectors" in pop["text"]
    for text in ["$268.80", "64.0 h", "27.8 M → 57.5 M", "85.3 M", "13.4 B", "Approval required",
                 "pipeline-scoped/text", plan.plan_hash, "184.0 GiB RAM", "<figcaption>"]:
        assert text in page, text


def test_html_handles_zeros_without_dividing_by_them():
    p = _check(plan_html(_none()))
    assert [f["name"] for f in p.figures] == CHARTS
    for f in p.figures:
        assert f["points"] == 0 and f["marks"] == 0 and f["svg"] == 0, f
        assert "no data" in f["text"]
    p = _check(plan_html(_initial()))
    pts = {f["name"]: (f["points"], f["marks"]) for f in p.figures}
    assert pts["population"] == (2, 2)  # start at zero, peak at cutover; nothing to retire
    assert pts["chunks-per-bucket"] == (3, 3)  # no old population
    assert all(f["marks"] == f["points"] for f in p.figures)


def test_html_document_scoped_and_sampled():
    page = plan_html(_document_scoped())
    p = _check(page)
    assert all(f["marks"] == f["points"] > 0 for f in p.figures)
    assert page.count("<li><code>p-0") == 50 and "… and 70 more" in page
    page = plan_html(_sampled())
    p = _check(page)
    assert "Projection (sampled)" in page and "55,912,346" in page
    tokens = next(f for f in p.figures if f["name"] == "token-sources")
    assert tokens["points"] == tokens["marks"] == 3  # projected tokens; reused, embedded
    assert "projected from the sample" in page


def test_html_escapes_document_ids_and_reasons():
    b = _body()
    b["work"]["bad_documents"] = [{"doc_id": "<script>alert(1)</script>", "reason": "a & b <i>"}]
    page = plan_html(seal(b))
    _check(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "a &amp; b &lt;i&gt;" in page


def test_write_reports_beside_the_plan(tmp_path):
    plan = seal(_body())
    path = write_plan(plan, tmp_path / "plans")
    md, page = write_reports(plan, path)
    assert md == path.with_suffix(".md") and page == path.with_suffix(".html")
    assert md.read_text(encoding="utf-8") == plan_markdown(plan)
    assert page.read_text(encoding="utf-8") == plan_html(plan)
    assert sorted(x.name for x in path.parent.iterdir()) == sorted([path.name, md.name, page.name])


def test_reports_of_a_real_plan(tmp_path):
    """The planner's own body, end to end: a tiny corpus re-chunked, plan and reports written by the API."""
    from reindex import api
    from reindex.domain.config import default_config_yaml

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    words = ["alpha", "beta", "gamma", "delta.", "epsilon\n\n"]
    for i in range(1, 6):
        (corpus / f"d{i}.txt").write_text(" ".join(words[(j * i) % 5] for j in range(60 * i * i)), encoding="utf-8")
    text = default_config_yaml(index="small", source="corpus")
    text = re.sub(r"\n  tokenizer: .*", "\n  tokenizer: whitespace", text)
    (tmp_path / "old.yaml").write_text(text, encoding="utf-8")
    (tmp_path / "new.yaml").write_text(re.sub(r"\n    size: \d+", "\n    size: 64", text), encoding="utf-8")
    plan, path = api.make_plan(tmp_path / "new.yaml", baseline_config=tmp_path / "old.yaml",
                               baseline_corpus=str(corpus), out=tmp_path / "plans")
    assert plan.kind == "pipeline-scoped/text" and path is not None
    page = path.with_suffix(".html").read_text(encoding="utf-8")
    p = _check(page)
    assert all(f["marks"] == f["points"] > 0 for f in p.figures), p.figures
    md = path.with_suffix(".md").read_text(encoding="utf-8")
    assert f"| Chunks | {plan.body['work']['chunks_old']:,} → {plan.body['work']['chunks_new']:,}" in md


@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(), reason="needs /usr/bin/chromium")
def test_html_renders_in_a_headless_browser(tmp_path):
    page = tmp_path / "plan.html"
    page.write_text(plan_html(seal(_body())), encoding="utf-8")
    png = tmp_path / "plan.png"
    subprocess.run(
        ["/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1200,2000", page.as_uri()],
        check=False, capture_output=True, timeout=120,
    )
    assert png.is_file()
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


def test_html_renders_the_markdown_of_its_prose_and_escapes_html_in_it():
    b = _body(explanation=["`text.chunker.size`: 512 → 256 **(recut)** <b>not bold</b>"])
    b["cost"]["rate_source"] = "default"  # its note names `reindex calibrate`
    page = plan_html(seal(b))
    _check(page)
    assert "`" not in page
    assert "<code>text.chunker.size</code>: 512 → 256 <strong>(recut)</strong> &lt;b&gt;not bold&lt;/b&gt;" in page
    assert "<code>reindex calibrate</code>" in page


def test_the_chunk_length_chart_uses_the_populations_own_range_so_250_to_200_shows(tmp_path):
    from helpers_index import SAMPLE

    from reindex import api

    for name, size in (("old", 250), ("new", 200)):
        (tmp_path / f"{name}.yaml").write_text(
            f"index: docs\nsource: {SAMPLE / 'corpus'}\ntext: {{chunker: {{kind: recursive, size: {size}}}}}\n"
            "vector: {provider: hash}\n", encoding="utf-8")
    plan, path = api.make_plan(tmp_path / "new.yaml", baseline_config=tmp_path / "old.yaml", out=tmp_path / "plans")
    h, w = plan.body["charts"]["chunk_length_histogram"], plan.body["work"]
    assert (sum(h["old"]), sum(h["new"])) == (w["chunks_old"], w["chunks_new"])
    assert len(h["buckets"]) == len(h["old"]) == len(h["new"]) <= 12

    def peak(xs):
        return max(range(len(xs)), key=xs.__getitem__)

    assert peak(h["old"]) > peak(h["new"])  # the 250-token population's bar is to the right of the 200-token one
    fixed = plan.body["charts"]["chunks_per_bucket"]
    assert peak(fixed["old"]) == peak(fixed["new"])  # in the power-of-two buckets both fall in 128-255
    p = _check(path.with_suffix(".html").read_text(encoding="utf-8"))
    fig = next(f for f in p.figures if f["name"] == "chunks-per-bucket")
    assert fig["marks"] == fig["points"] == sum(1 for v in (*h["old"], *h["new"]) if v)
    from reindex.reports._charts import bucket_label

    assert f"old {bucket_label(h['buckets'][peak(h['old'])])} tokens" in fig["text"]
    assert f"new {bucket_label(h['buckets'][peak(h['new'])])} tokens" in fig["text"]


def test_each_what_if_row_is_priced_with_its_own_token_count(tmp_path):
    """A partitioning chunker embeds each token once at every size, but the model reads two special tokens
    per chunk: smaller chunks take longer for the same text. Each row's hours come from its own counts."""
    from helpers_index import SAMPLE

    from reindex import api

    (tmp_path / "reindex.yaml").write_text(
        f"index: docs\nsource: {SAMPLE / 'corpus'}\ntext: {{chunker: {{kind: recursive, size: 150}}}}\n"
        f"cost: {{tokens_per_minute: 60000, usd_per_mtok: 0.02}}\nstate: {{uri: {tmp_path / 'state'}}}\n",
        encoding="utf-8")
    plan, _ = api.make_plan(tmp_path / "reindex.yaml", out=None)
    rows = plan.body["sensitivity"]["what_if"]
    current = next(r for r in rows if r["current"])
    assert current["hours"] == pytest.approx(current["tokens_full_reembed"] / 60000 / 60, abs=1e-6)
    per_minute = 60000 * (current["tokens_full_reembed"] + 2 * current["chunks"]) / current["tokens_full_reembed"]
    for r in rows:
        assert r["tokens_full_reembed"] == current["tokens_full_reembed"]  # partitioning: the same text
        assert r["hours"] == pytest.approx((r["tokens_full_reembed"] + 2 * r["chunks"]) / per_minute / 60, abs=1e-6)
        assert r["usd"] == pytest.approx(r["tokens_full_reembed"] / 1e6 * 0.02, abs=1e-6)
    by_chunks = sorted(rows, key=lambda r: r["chunks"])
    assert all(a["hours"] < b["hours"] for a, b in zip(by_chunks, by_chunks[1:]))  # no two rows the same


def test_the_population_chart_keeps_the_old_population_through_the_configured_retention_window():
    b = _body(config={"cutover": {"retention_days": 7}})
    p = _check(plan_html(seal(b)))
    fig = next(f for f in p.figures if f["name"] == "population")
    assert "rollback window: old kept 7 days" in fig["text"] and "old retired (gc) · +7 d" in fig["text"]
    page = plan_html(seal(b))
    old_area = re.search(r'<path class="area" fill="[^"]+" d="M(\d+),[\d.]+ L\d+,([\d.]+) L([\d.]+),', page)
    window = re.search(r'<rect class="window" x="([\d.]+)" y="[\d.]+" width="([\d.]+)"', page)
    assert old_area and window
    assert float(old_area[3]) == pytest.approx(float(window[1]) + float(window[2]), abs=0.2)  # old ends with the window
