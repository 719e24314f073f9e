"""Use cases: what the CLI and the flows do, one module per role. `reindex.api` re-exports the stable names."""

__all__ = []
