"""The books: the index's state in the object store (population records, chunk manifests, the live pointer, cursors, carried chunks, free pairs, locks) and its layout, owned by one class (books.layout)."""

__all__: list[str] = []
