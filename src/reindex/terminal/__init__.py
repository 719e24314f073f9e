"""What a terminal shows: the progress bar of a long apply, and `make demo`."""

__all__: list[str] = []
