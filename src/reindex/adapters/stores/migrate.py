"""Convert a folder made by the previous embedded store (qdrant-client local mode) into the current one.

``python -m reindex.adapters.stores.migrate OLD NEW`` copies every collection (points with vectors and payloads),
indexes ``doc_id`` and ``fingerprint`` as apply does, builds the HNSW index, then recreates every alias.
``OLD`` is only read. Point ``store.path`` at ``NEW`` afterwards.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reindex.adapters.stores.edge import is_edge_folder, is_local_mode_folder, open_edge_store
from reindex.adapters.stores.opening import open_vector_store
from reindex.adapters.stores.payload import INDEXED_FIELDS
from reindex.adapters.stores.vectors import VectorStoreError

__all__ = ["Conversion", "convert_local_store", "main"]

_PAGE = 2048


@dataclass(frozen=True, slots=True)
class Conversion:
    """What a conversion copied."""

    collections: dict[str, int]  # name -> points copied
    aliases: dict[str, str]


def convert_local_store(
    src: str | Path, dst: str | Path, progress: Callable[[str], None] | None = None
) -> Conversion:
    """Copy a local-mode store folder ``src`` into a new embedded store at ``dst`` (must not hold a store)."""
    src, dst = Path(src), Path(dst)
    if not is_local_mode_folder(src):
        raise VectorStoreError(f"`{src}` is not a qdrant-client local-mode folder (no meta.json); nothing to convert.")
    if is_edge_folder(dst) or (dst.exists() and any(dst.iterdir())):
        raise VectorStoreError(f"`{dst}` is not empty; convert into a new folder.")
    old = open_vector_store(None, str(src), backend="local")
    new = open_edge_store(dst)
    copied: dict[str, int] = {}
    try:
        for name in old.list_collections():
            info = old.collection_info(name)
            new.create_collection(name, dimension=info["dimension"], distance=info["distance"], bulk=True)
            for field in INDEXED_FIELDS:
                new.create_payload_index(name, field, "keyword")
            page, n = [], 0
            for point in old.scroll(name, with_vectors=True, batch=_PAGE):
                page.append(point)
                if len(page) == _PAGE:
                    new.upsert(name, page)
                    n, page = n + len(page), []
            new.upsert(name, page)
            n += len(page)
            new.finish_bulk(name)
            if new.count(name) != info["points_count"]:
                raise VectorStoreError(
                    f"Collection `{name}`: copied {new.count(name)} points but `{src}` holds {info['points_count']}."
                )
            copied[name] = n
            if progress:
                progress(f"{name}: {n:,} points")
        aliases = old.list_aliases()
        for alias, target in sorted(aliases.items()):
            new.swap_alias(alias, target, None)
    finally:
        new.close()
        old.close()
    return Conversion(copied, aliases)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m reindex.adapters.stores.migrate OLD_LOCAL_MODE_FOLDER NEW_FOLDER", file=sys.stderr)
        return 2
    try:
        result = convert_local_store(args[0], args[1], progress=print)
    except VectorStoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"converted {len(result.collections)} collections, {len(result.aliases)} aliases into {args[1]}; "
          f"set store.path to it")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
