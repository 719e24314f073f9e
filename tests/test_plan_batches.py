"""The plan counts what apply embeds when documents share chunk texts (a licence footer, a notice):
apply embeds a text once per batch of a shard's documents, and not at all when another document of the
batch reuses it; the planner replays that batching (``planner._work.ApplyBatches``).

In process, a folder corpus of 12 short documents that end with the same footer paragraph (its own
chunk at recursive:size=60), the ``hash`` embedder, 4 shards, embedded Qdrant."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers_index import Workspace, read_log
from reindex.books.manifests import shard_of

FOOTER = ("Copyright notice. This document is placed in the public domain or under the CC0-1.0-Universal "
          "license, whichever is more permissive. Questions about it go to the list, not to the authors.\n")
BODY = ("Document {n} describes a change to the frobnicator: why the old behaviour surprised users, which "
        "releases it affects, and how the new behaviour is rolled out across {n} stages.\n\n")


@pytest.fixture
def embed_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "embed.log"
    monkeypatch.setenv("REINDEX_EMBED_LOG", str(path))
    return path


def _workspace(root: Path) -> Workspace:
    ws = Workspace(root, size=60)
    shutil.rmtree(ws.corpus)
    ws.corpus.mkdir()
    for n in range(12):
        (ws.corpus / f"doc-{n:02d}.txt").write_text(BODY.format(n=n) + FOOTER, encoding="utf-8")
    return ws


def test_an_initial_plan_counts_a_shared_footer_once_per_apply_batch(tmp_path: Path, embed_log: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    plan, path = ws.plan()
    w = plan.body["work"]
    shards = {shard_of(f"doc-{n:02d}.txt", 4) for n in range(12)}
    # Each document has 2 chunks (body, footer); the footer is embedded once per shard holding documents.
    assert w["chunks_new"] == 24
    assert w["chunks_to_embed"] == 12 + len(shards) < 24
    r = ws.apply(path)
    a = r.report["actual"]
    assert (a["embedded"], a["tokens_embedded"]) == (w["chunks_to_embed"], w["tokens_to_embed"])
    assert sum(read_log(embed_log).values()) == w["chunks_to_embed"]


def test_a_text_another_document_of_the_batch_reuses_is_not_planned(tmp_path: Path, embed_log: Path) -> None:
    ws = _workspace(tmp_path / "ws")
    ws.build_live()
    # Two documents of one shard: one keeps its footer (reused in place) and edits its body, the other
    # drops the footer first and gets it back now.
    by_shard: dict[int, list[str]] = {}
    for n in range(12):
        by_shard.setdefault(shard_of(f"doc-{n:02d}.txt", 4), []).append(f"doc-{n:02d}.txt")
    keeper, taker = next(docs for docs in by_shard.values() if len(docs) >= 2)[:2]
    (ws.corpus / taker).write_text(BODY.format(n=99), encoding="utf-8")
    _, path = ws.plan()
    assert ws.apply(path).status == "done"
    (ws.corpus / keeper).write_text(BODY.format(n=77) + FOOTER, encoding="utf-8")
    (ws.corpus / taker).write_text(BODY.format(n=99) + FOOTER, encoding="utf-8")
    before = sum(read_log(embed_log).values())
    plan, path = ws.plan()
    w = plan.body["work"]
    assert plan.kind == "document-scoped" and w["documents"]["edited"] == 2
    # The taker's footer comes from the keeper's reused point: only the keeper's new body is embedded.
    assert w["chunks_to_embed"] == 1
    r = ws.apply(path)
    a = r.report["actual"]
    assert (a["embedded"], a["tokens_embedded"]) == (w["chunks_to_embed"], w["tokens_to_embed"])
    assert sum(read_log(embed_log).values()) - before == 1


def test_a_shard_of_33_documents_is_two_batches_so_the_footer_is_embedded_twice(tmp_path: Path, embed_log: Path) -> None:
    from reindex.books.manifests import DOC_BATCH

    ws = _workspace(tmp_path / "ws")
    shutil.rmtree(ws.corpus)
    ws.corpus.mkdir()
    names = [name for name in (f"doc-{n:03d}.txt" for n in range(400)) if shard_of(name, 4) == 0][: DOC_BATCH + 1]
    assert len(names) == 33
    for n, name in enumerate(names):
        (ws.corpus / name).write_text(BODY.format(n=n) + FOOTER, encoding="utf-8")
    plan, path = ws.plan()
    w = plan.body["work"]
    assert w["chunks_to_embed"] == 33 + 2
    a = ws.apply(path).report["actual"]
    assert (a["embedded"], a["tokens_embedded"]) == (w["chunks_to_embed"], w["tokens_to_embed"])
