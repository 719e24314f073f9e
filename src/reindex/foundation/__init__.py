"""Foundations: durable writes, retries, statistics, Parquet, environment settings, process identity, the CPU clock. Imported by every layer above; imports nothing of reindex but the errors."""

__all__: list[str] = []
