"""Prefect deployment entrypoints for reindex (see flows/prefect.yaml).

The flows live in the library (``reindex.orchestration``); this file only re-exports them so that
``prefect deploy`` can name them as ``flows/reindex_flows.py:<flow>``. ``reindex deploy`` uses the
module path ``reindex.orchestration.<flow>`` instead and needs no checkout on the worker."""

from reindex.orchestration import gc_flow, reindex_flow, sync_flow, watch_flow

__all__ = ["gc_flow", "reindex_flow", "sync_flow", "watch_flow"]
