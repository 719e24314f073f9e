"""The domain's vocabulary: the typed config and its two halves, canonical identity (text id, vector id, fingerprints, point ids), where models live on disk, and the decisions as types (change kinds, population states)."""

__all__: list[str] = []
