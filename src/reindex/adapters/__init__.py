"""Adapters behind small protocols: sources, chunkers, tokenizers, embedders, vector and object stores, and the text pipeline that chains the text half's adapters (extract → normalise → chunk → fingerprint)."""

__all__: list[str] = []
