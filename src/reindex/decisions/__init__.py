"""The decisions: old vs new on identical queries (evaluation), the gate and the alias swap (cutover), serving modes across a model change, the forecast, and the books checked against the store (drift)."""

__all__: list[str] = []
