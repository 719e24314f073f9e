"""The state store as readers open it (:class:`ReaderStore`, :func:`open_reader_store`): fail fast, and keep serving
the last good bytes of each key through an outage of the store (DESIGN.md invariant 20; issue 43)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from reindex.adapters.stores.objects import ObjectStore, S3ObjectStore, open_object_store, split_s3_uri
from reindex.errors import StateError, TransientError

__all__ = ["READER_QUIET_S", "ReaderStore", "open_reader_store"]

T = TypeVar("T")


def open_reader_store(uri: str, endpoint_url: str | None = None) -> ReaderStore:
    """The state store as a reader opens it (:class:`ReaderStore`): S3 asked once per read with short timeouts (a
    reader answers from what it read before rather than wait), a folder as it is."""
    if uri.startswith("s3://"):
        bucket, prefix = split_s3_uri(uri)
        inner: ObjectStore = S3ObjectStore(bucket, prefix, endpoint_url=endpoint_url, attempts=1,
                                           connect_timeout_s=0.3, read_timeout_s=0.7)
    else:
        inner = open_object_store(uri, endpoint_url)
    return ReaderStore(inner)



#: After a read the state store did not answer, a reader does not ask it again for this long: it serves the last
#: good bytes of each key it read (one probe per period, never a retry storm on the read path).
READER_QUIET_S = 5.0


class ReaderStore:
    """A read-only view of a state store for readers (``Querier``, ``reindex query``, the retrievers): each key's last
    good bytes are kept, and while the store does not answer (a :class:`~reindex.errors.TransientError`: refused,
    timed out, 5xx; asked once, with short timeouts by :func:`open_reader_store`) they are served instead, for
    :data:`READER_QUIET_S` at a time without asking again. The outage is logged once, as a warning, and its end
    once. A key never read before the outage has nothing to serve: its read fails at once, saying so. Writes are
    refused: a reader never writes the books."""

    def __init__(self, inner: ObjectStore, *, quiet_s: float = READER_QUIET_S,
                 clock: Callable[[], float] | None = None) -> None:
        self._inner, self._quiet = inner, quiet_s
        self._clock = clock or time.monotonic
        self._good: dict[str, Any] = {}  # key → its last good bytes (None: absent), or a prefix → its last listing
        self._down_until: float | None = None  # while set: the store did not answer; asked again after this
        self._down_since: str | None = None
        self._lock = threading.Lock()
        self._log = logging.getLogger("reindex")
        self.remote = getattr(inner, "remote", False)

    @property
    def down(self) -> bool:
        """Whether the last read found the store not answering (and it has not answered since)."""
        return self._down_until is not None

    def describe(self) -> str:
        return self._inner.describe()

    def describe_key(self, key: str) -> str:
        describe_key = getattr(self._inner, "describe_key", None)
        return describe_key(key) if callable(describe_key) else f"{self.describe()}/{key}"

    def _read(self, key: str, fn: Callable[[], T], keep: Callable[[T], Any]) -> T:
        with self._lock:
            resting = self._down_until is not None and self._clock() < self._down_until
        if not resting:
            try:
                value = fn()
            except TransientError as err:
                self._went_down(err)
            else:
                with self._lock:
                    self._good[key] = keep(value)
                    came_back, self._down_until, self._down_since = self._down_until is not None, None, None
                if came_back:
                    self._log.info("the state store %s answers again; readers follow it from now on", self.describe())
                return value
        with self._lock:
            if key in self._good:
                return self._good[key]  # type: ignore[return-value]
        raise TransientError(f"the state store {self.describe()} does not answer ({self._down_since}) and this reader "
                             f"has not read {key} before; it serves what it read, and asks the store again every "
                             f"{self._quiet:g} s")

    def _went_down(self, err: BaseException) -> None:
        with self._lock:
            first = self._down_until is None
            self._down_until = self._clock() + self._quiet
            if first:
                self._down_since = f"since {_dt.datetime.now().strftime('%H:%M:%S')}: {' '.join(str(err).split())}"
        if first:
            self._log.warning("the state store %s does not answer (%s); readers serve the records they read last, "
                              "and ask it again every %g s", self.describe(), " ".join(str(err).split()), self._quiet)

    def get(self, key: str) -> bytes | None:
        return self._read(key, lambda: self._inner.get(key), lambda data: data)

    def exists(self, key: str) -> bool:
        return self.get(key) is not None

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        got = self.get(key)
        return None if got is None else (got, hashlib.blake2b(got, digest_size=16).hexdigest())

    def list(self, prefix: str = "") -> list[str]:
        return self._read(f"\0list:{prefix}", lambda: self._inner.list(prefix), list)

    def _refuse(self, *_: Any, **__: Any) -> Any:
        raise StateError(f"{self.describe()}: a reader's view of the state store is read-only")

    put = put_if_absent = put_if_version = delete = delete_if_version = get_versioned_aged = _refuse
