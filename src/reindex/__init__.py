"""reindex: plan, price and safely carry out reindexing of vector search indexes.

The Python API is :mod:`reindex.api` (``from reindex import api``; see docs/python-api.md): this package
module stays a version string so that ``import reindex`` is cheap and every layer can import it."""

__all__ = ["__version__"]

__version__ = "0.1.0"
