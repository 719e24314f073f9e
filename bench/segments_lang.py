"""Results per language through reindex's own cutover gate, on the shared corpus with the real model (issue 32,
item 4): the per-language gate table of two text-half changes, printed as Markdown for bench/RESULTS.md.

Workspace (tests/helpers_langs.py): 84 English PEP excerpts and 8 Chinese JavaGuide excerpts that the labelled
queries point at, 20 and 24 unlabelled excerpts of each, a ``lang`` column; the corpus's own queries (with ``lang``).
Each step is one fresh ``reindex`` process:

1. live: chunk sizes in characters, 100 a chunk: ``plan`` → ``apply`` → ``cutover`` (initial build);
2. chunk sizes in whitespace words, 200 a chunk: ``plan`` → ``approve`` → ``apply`` → ``cutover --queries
   queries.jsonl --json`` (the gate fails on ``lang=zh``; the alias stays);
3. the live text half with NFKC normalisation: the same, the gate passes and the alias moves.

    HF_HUB_OFFLINE=1 .venv/bin/python bench/segments_lang.py [--work build/segments_lang]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from helpers_langs import CHARS_100, CHARS_100_NFKC, WORDS_200, gate_table, lang_config, lang_corpus  # noqa: E402

REINDEX = Path(sys.executable).with_name("reindex")
CORPUS = REPO.parent / "shared" / "corpus"


def run(cmd: list[str], cwd: Path, ok: tuple[int, ...] = (0,)) -> str:
    print("$", " ".join(cmd), flush=True)
    t = time.perf_counter()
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, env=os.environ.copy())
    if p.returncode not in ok:
        raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    print(f"  exit {p.returncode} after {time.perf_counter() - t:.1f} s", flush=True)
    return p.stdout


def step(work: Path, text: str, queries: Path | None) -> dict | None:
    lang_config(work / "reindex.yaml", text)
    path = json.loads(run([str(REINDEX), "plan", "--json"], work, ok=(2,)))["plan_file"]
    if queries is not None:
        run([str(REINDEX), "approve", path, "--by", "bench"], work)
    run([str(REINDEX), "apply", path, "--no-prefect"], work)
    cmd = [str(REINDEX), "cutover", path, "--json"] + (["--queries", str(queries)] if queries else [])
    out = json.loads(run(cmd, work, ok=(0, 3)))
    return out if queries else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default="build/segments_lang")
    args = ap.parse_args()
    work = Path(args.work).resolve()
    shutil.rmtree(work, ignore_errors=True)
    _, queries = lang_corpus(CORPUS, work)
    step(work, CHARS_100, None)
    for name, text in (("words, 200 a chunk", WORDS_200), ("characters, 100 a chunk, NFKC", CHARS_100_NFKC)):
        rep = step(work, text, queries)
        print(f"\n### characters, 100 a chunk → {name}: gate {'passed' if rep['passed'] else 'failed'}")
        for r in rep["rules"]:
            print(f"- {r['rule']}: {'pass' if r['passed'] else 'FAIL'} ({r['detail']})")
        print()
        print("\n".join(gate_table(rep)))


if __name__ == "__main__":
    main()
