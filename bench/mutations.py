"""One-line mutations of critical code, each run against the tests that claim to guard it.

A mutant is *killed* when at least one of its tests fails. Every mutant here must be killed: a survivor
names a check no test can see. The file is restored after each run (also on Ctrl-C).

    HF_HUB_OFFLINE=1 .venv/bin/python bench/mutations.py [--only SUBSTRING]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "reindex"

# (name, file, exact original text, mutated text, tests that must catch it)
MUTANTS = [
    ("gate uses the mean instead of the lower bound", "cutover.py",
     'diff["low"] >= policy.min_recall_delta', 'diff["mean"] >= policy.min_recall_delta',
     "tests/test_guards.py -k lower_bound"),
    ("gate uses the upper bound", "cutover.py",
     'diff["low"] >= policy.min_recall_delta', 'diff["high"] >= policy.min_recall_delta',
     "tests/test_guards.py -k lower_bound"),
    ("unlabelled overlap rule always passes", "cutover.py",
     "ov >= policy.min_overlap,", "True,", "tests/test_guards.py -k overlap"),
    ("point-count rule always passes", "cutover.py",
     "shadow_points == planned_chunks,", "True,", "tests/test_guards.py -k point_count"),
    ("config drift not refused", "usecases/apply.py",
     'if inputs["config"]["digest"] not in (config_digest(cfg), legacy_config_digest(cfg)):', "if False:",
     "tests/test_guards.py -k config_changed"),
    ("live-population drift not refused", "usecases/apply.py",
     "        elif manifest_digest(state, cfg.index, live.collection,\n",
     "        elif False and manifest_digest(state, cfg.index, live.collection,\n",
     "tests/test_guards.py -k live_population"),
    ("in-place deletion of removed documents skipped", "execution.py",
     "        if gone:\n", "        if False:\n", "tests/test_guards.py -k removed_document"),
    ("post-swap verification query skipped", "cutover.py",
     'verified = bool(hits) and hits[0].payload.get("pipeline_id") == want', "verified = True",
     "tests/test_guards.py -k verifying_query"),
    ("population point count not verified", "cutover.py",
     "if points != len(rows):", "if False:", "tests/test_safety.py -k missing_points"),
    ("a population in any state may go live", "cutover.py",
     "if rec.state not in SERVABLE:", "if False:", "tests/test_safety.py -k never_verified"),
    ("unreadable documents planned as removed", "planner/_change.py",
     "        if doc_id in bad:\n", "        if False:\n", "tests/test_safety.py -k unreadable"),
    ("approval read back from the plan file", "usecases/apply.py",
     "check_approval(plan, read_approval(plan_path, signing_key(cfg.approval.hmac_key_env)),\n"
     "                   approval_of_plan(plan.body, cfg, kind))",
     "check_approval(plan, read_approval(plan_path, signing_key(cfg.approval.hmac_key_env)))",
     "tests/test_safety.py -k self_approved"),
    # issue 22, part b
    ("approval signature not verified", "approvals.py",
     "        _verify(rec, key, path)\n", "        pass\n", "tests/test_signed_approvals.py"),
    ("a tampered approval passes", "approvals.py",
     "if not hmac.compare_digest(rec.signature, _sign(rec.signed_fields(), key)):", "if False:",
     "tests/test_signed_approvals.py -k tampered"),
    ("cutover --force reads the approval unverified", "usecases/lifecycle.py",
     "        approval = read_approval(path, signing_key(cfg.approval.hmac_key_env))\n        if approval is None",
     "        approval = read_approval(path)\n        if approval is None", "tests/test_signed_approvals.py -k tampered"),
    ("free-disk check skipped", "usecases/disk.py", "    if need > free:", "    if False:",
     "tests/test_safety.py -k disk"),
    ("free-disk check off by one", "usecases/disk.py", "    if need > free:", "    if need >= free:",
     "tests/test_safety.py -k disk"),
    ("in-place copy not counted", "usecases/disk.py",
     'need += generation_copy_bytes(folder, plan.body["inputs"]["baseline"]["collection"])', "pass",
     "tests/test_safety.py -k disk"),
    ("credentials in a URL accepted", "config.py", '    if "@" in netloc:', "    if False:",
     "tests/test_config.py -k config_errors"),
    ("duplicate YAML key accepted", "config.py", "            if first != key_node.start_mark.line:",
     "            if False:", "tests/test_config.py -k config_errors"),
    ("apply.shards accepts true", "config.py",
     'shards: int = Field(16, gt=0, strict=True,', 'shards: int = Field(16, gt=0,', "tests/test_config.py -k config_errors"),
    ("reader loads the generation itself (writes into the store)", "stores/edge/_reader.py",
     "shard = engine.load(view or folder)", "shard = engine.load(folder)", "tests/test_edge_store.py -k writes_nothing"),
    ("absolute locations in the config digest", "identity.py",
     "        data[section] = {k: v for k, v in data[section].items() if k != name}", "        pass",
     "tests/test_safety.py -k moved"),
    ("population record types unchecked", "manifests.py",
     "        problem = _record_problem(d, _RECORD_TYPES)\n        if problem is not None:",
     "        problem = None\n        if problem is not None:", "tests/test_corrupt_state.py -k population"),
    ("a raising splitter escapes unnamed", "chunkers/external.py",
     "            result = self.split(text)\n        except Exception as err:",
     "            result = self.split(text)\n        except ArithmeticError as err:",
     "tests/test_external_splitters.py -k raises"),
    ("plan kind not re-derived", "usecases/apply.py",
     "    if kind != plan.kind:\n", "    if False:\n", "tests/test_safety.py -k self_approved"),
    ("no token limit for unapproved runs", "execution.py",
     "if ctx.token_budget is not None and ctx.tokens_spent + cost > ctx.token_budget:", "if False:",
     "tests/test_safety.py -k understated"),
    ("mass removal needs no approval", "planner/_classify.py",
     "if live_documents and removed > pol.max_removed_share * live_documents:", "if False:",
     "tests/test_safety.py -k emptied"),
    ("an interrupted swap is not completed", "cutover.py",
     '    if current == intent["to"]:\n', "    if False:\n", "tests/test_safety.py -k right_after_the_swap"),
    ("gc ignores the rollback window", "cutover.py",
     'if rec and rec.state == "retired" and now - rec.updated_at < retention_s and not force:', "if False:",
     "tests/test_safety.py -k retention_window"),
    ("gc deletes without marking first", "cutover.py",
     '    _set_state(state, index, collection, "deleting", time.time())\n', "", "tests/test_safety.py -k inside_gc"),
    ("finished embedding batches not written before the next", "execution.py",
     "result, on_batch=flush)", "result, on_batch=None)", "tests/test_apply_crash.py -k one_embedding_batch"),
    ("catch-up after a failed run", "runners/__init__.py",
     "clean = not failed and not any(r[\"failures\"] for r in results)", "clean = True",
     "tests/test_runners.py -k summarize"),
    ("in-place sync uses the current shard count", "usecases/apply.py",
     "shards = old_cfg.apply.shards if in_place and old_cfg else cfg.apply.shards", "shards = cfg.apply.shards",
     "tests/test_safety.py -k operational"),
    # issue 22: five gaps no test in the module's own test files caught
    ("gc's automatic path without its live guard", "cutover.py",
     "chosen = [c for c, r in recs.items() if c not in protected and (", "chosen = [c for c, r in recs.items() if (",
     "tests/test_safety.py -k never_picks"),
    ("gc's delete_population without its alias guard", "cutover.py",
     "    if collection in set(store.list_aliases().values()):\n        raise CutoverError(f\"{collection} is served",
     "    if False:\n        raise CutoverError(f\"{collection} is served", "tests/test_safety.py -k delete_population_refuses"),
    ("edge store deletes an aliased collection", "stores/edge/_writer.py",
     "        if targets:\n            raise VectorStoreError(\n                f\"Collection `{name}` is what alias",
     "        if False:\n            raise VectorStoreError(\n                f\"Collection `{name}` is what alias",
     "tests/test_edge_store.py -k alias_points"),
    ("in-place sync deletes stale points before upserting new ones", "execution.py",
     "    written = _embed_missing(ctx, records, vectors, result, metas)\n",
     "    _keep = set(new_ids)\n    _stale = [row.point_id for doc_id in records for row in old_rows.get(doc_id, ()) "
     "if row.point_id not in _keep]\n    if ctx.in_place and _stale:\n        retry_transient(ctx.store.delete_points, "
     "ctx.target, _stale)\n    written = _embed_missing(ctx, records, vectors, result, metas)\n",
     "tests/test_guards.py -k before_deleting"),
    ("drift check ignores a moved live population", "usecases/apply.py",
     'if live is None or live.collection != base["collection"]:', "if live is None:",
     "tests/test_guards.py -k moved_to_another"),
    ("local backend with synchronous=OFF", "stores/qdrant.py",
     'conn.execute("PRAGMA synchronous=FULL")', 'conn.execute("PRAGMA synchronous=OFF")',
     "tests/test_qdrant_store.py -k synchronous"),
    ("heartbeat never started", "locks.py",
     "    def __enter__(self) -> Self:\n        self.start_heartbeat()\n",
     "    def __enter__(self) -> Self:\n        pass\n", "tests/test_locks.py"),
    ("a live holder of this host treated as dead", "locks.py",
     "        if info.held and not info.stale(current[2] if current is not None else 0.0) \\\n"
     "                and not _dead_local_owner(info.owner or \"\"):", "        if False:",
     "tests/test_locks.py"),
    ("a held lock judged stale by the contender's wall clock", "locks.py",
     "        return age > self.ttl\n", "        return self.expired()\n", "tests/test_locks.py -k 300_s"),
    ("the real embedder returns vectors out of order", "embedders/sentence_transformers.py",
     "return EmbedResult(np.asarray(vecs, dtype=np.float32), truncated",
     "return EmbedResult(np.asarray(vecs, dtype=np.float32)[::-1], truncated", "tests/test_real_model.py"),
    # issue 33: readers on a read-only store, free-space guards and no SIGBUS (the tests skip without root)
    ("a read-only reader does not lock the writer's lease file", "stores/edge/_reader.py",
     "        return os.open(lease, os.O_RDONLY), False", "        raise FileNotFoundError",
     "tests/test_readonly_store.py"),
    ("a read-only reader loads links to files the engine opens for writing", "stores/edge/_reader.py",
     "_reader_view(folder, read_only=not writable)", "_reader_view(folder, read_only=False)",
     "tests/test_readonly_store.py"),
    ("published generation without a lease file", "stores/edge/_writer.py",
     "                make_lease(gen_dir(self._coll(o.record.name), o.gen))  # before readers can see the generation\n",
     "", "tests/test_edge_store.py -k lease_file"),
    ("a load on tmpfs not prefilled", "stores/edge/_space.py",
     "    if not fills_holes_when_mapped(folder):\n        return\n    holes = _holes(folder)",
     "    return\n    holes = _holes(folder)", "tests/test_full_disk.py -k load_on"),
    ("a write's free space not checked", "stores/edge/_space.py",
     "    check_free(folder, 3 * data_bytes + WRITE_MARGIN_BYTES, what)", "    pass", "tests/test_full_disk.py -k write_on"),
    ("cutover without its free-space guard", "usecases/lifecycle.py",
     "    disk.require_free_for_cutover(cfg, shadow,", "    0 and disk.require_free_for_cutover(cfg, shadow,",
     "tests/test_full_disk.py -k nearly_full"),
    ("first loads on tmpfs not counted", "usecases/disk.py",
     "    return sum(newest_load_bytes(folder, c) for c in", "    return 0 * sum(newest_load_bytes(folder, c) for c in",
     "tests/test_full_disk.py -k nearly_full"),
    ("the delta generation's load not counted on tmpfs", "stores/edge/_space.py",
     "                total += st.st_size if populated else _allocated(st)", "                total += _allocated(st)",
     "tests/test_full_disk.py -k nearly_full"),
]


def run_one(name: str, rel: str, old: str, new: str, tests: str) -> dict:
    path = SRC / rel
    original = path.read_text(encoding="utf-8")
    if original.count(old) != 1:
        return {"name": name, "file": rel, "status": f"NOT APPLIED (found {original.count(old)}×)", "seconds": 0}
    t0 = time.perf_counter()
    try:
        path.write_text(original.replace(old, new), encoding="utf-8")
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests.split()],
                           cwd=REPO, capture_output=True, text=True, timeout=900)
    finally:
        path.write_text(original, encoding="utf-8")
    status = "killed" if r.returncode == 1 else ("SURVIVED" if r.returncode == 0 else f"error (exit {r.returncode})")
    return {"name": name, "file": rel, "status": status, "tests": tests, "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="run the mutants whose name contains this")
    args = ap.parse_args()
    results = [run_one(*m) for m in MUTANTS if args.only is None or args.only in m[0]]
    print("| mutant | file | result | tests | s |")
    print("|---|---|---|---|---:|")
    for r in results:
        print(f"| {r['name']} | {r['file']} | {r['status']} | `{r.get('tests', '')}` | {r['seconds']} |")
    killed = sum(r["status"] == "killed" for r in results)
    print(f"\n{killed} of {len(results)} mutants killed")
    sys.exit(0 if killed == len(results) else 1)


if __name__ == "__main__":
    main()
