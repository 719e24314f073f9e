"""Kept import path for scripts written against earlier versions: the code lives in
:mod:`reindex.measure.sticky`. Nothing inside ``src/`` imports this module (tests/test_layers.py)."""

from reindex.measure import sticky as _sticky
from reindex.measure.sticky import *  # noqa: F401,F403

__all__ = list(_sticky.__all__)
