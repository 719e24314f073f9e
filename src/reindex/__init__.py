"""reindex: plan, price and safely carry out reindexing of vector search indexes."""

__version__ = "0.1.0"
