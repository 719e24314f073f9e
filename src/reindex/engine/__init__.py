"""The engine: one shard run idempotently, in-place syncs, catch-up, a shard as plain data for workers, and the progress of a running apply."""

__all__: list[str] = []
