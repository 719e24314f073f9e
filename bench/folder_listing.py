"""A folder source's listing (the cursor of a folder: every file's size and mtime, no content read) against the
raw limit of the same walk: ``os.walk`` and one ``os.stat`` per file, side by side in one run.

    PYTHONPATH=src .venv/bin/python bench/folder_listing.py --files 100000 [--dir build/listing] [--repeat 5]

Writes ``--files`` small files into ``--dir`` (100 per sub-folder; kept for the next run) unless they are there,
then times, ``--repeat`` times and interleaved, ``DirectorySource.position()`` (the listing a folder sync makes
three times: the plan, apply's drift check, the catch-up) and the bare walk, in CPU-seconds of this process.
Prints each pair and the median ratio ours ÷ bare.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
from pathlib import Path

from reindex.domain.config import SourceConfig
from reindex.adapters.sources.directory import DirectorySource


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def write_files(root: Path, n: int) -> None:
    marker = root / f".written-{n}"
    if marker.exists():
        return
    for i in range(n):
        folder = root / f"f{i // 100:05d}"
        if i % 100 == 0:
            folder.mkdir(parents=True, exist_ok=True)
        (folder / f"d{i:07d}.txt").write_text(f"Document {i}.\n", encoding="utf-8")
    marker.write_text("")


def bare(root: Path) -> int:
    n = 0
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.startswith("."):
                os.stat(os.path.join(folder, name))
                n += 1
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--dir", type=Path, default=Path("build/listing"))
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    root = args.dir.resolve() / str(args.files)
    root.mkdir(parents=True, exist_ok=True)
    write_files(root, args.files)
    source = DirectorySource(SourceConfig(uri=str(root)), root)
    ratios = []
    for _ in range(args.repeat):
        t = cpu()
        listed = len(source.position().entries)
        ours = cpu() - t
        t = cpu()
        walked = bare(root)
        raw = cpu() - t
        assert listed == walked == args.files, (listed, walked)
        ratios.append(ours / raw)
        print(f"{args.files:,} files: listing {ours:.3f} CPU-s, bare walk + stat {raw:.3f} CPU-s, ratio {ours / raw:.2f}",
              flush=True)
    print(f"median ratio listing ÷ bare walk: {statistics.median(ratios):.2f} (load {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
