"""The object store behind state (plans, manifests, locks, chunk manifests): a local folder or an
S3 prefix. This is the only module that imports boto3.

Keys are relative POSIX paths (``plans/2026-01-01.json``). Both backends give the same guarantees:
``put`` is atomic (readers see the old bytes or the new bytes, never a mix), ``put_if_absent``
creates a key only if nobody else has, and ``get_versioned`` / ``put_if_version`` /
``delete_if_version`` are compare-and-swap on a version (the building blocks of fencing locks).

A version is opaque: the S3 ETag, or a digest of the file's bytes for the folder. Equal versions
mean equal bytes, so callers that need to tell two writes apart put a fresh nonce in the bytes.

A signature (``signatures``, ``signature``, ``get_signed``) is what the listing says of an object without reading
it — a file's inode, size and times, an object's ETag — and it moves whenever the bytes do: objects a process reads
again are kept by it (``get_cached``). Readers open the state through :mod:`reindex.adapters.stores.reading`.

Lines: the two backends of one protocol side by side, each guarantee (atomic put, create-if-absent,
compare-and-swap, signatures) written once per backend where the other can be read beside it.
"""

from __future__ import annotations

import datetime as _dt
import email.utils
import errno
import fcntl
import hashlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import botocore.exceptions as bex  # the error types only (~0.02 CPU-s); boto3 itself is imported by S3ObjectStore

from reindex.foundation.atomic import TMP_PREFIX, atomic_write, fsync_dir, make_folders, write_temp
from reindex.errors import StateError, TransientError
from reindex.foundation.retry import RetriesExhausted, call_with_retries

__all__ = [
    "CACHE_BYTES", "LocalObjectStore", "ObjectStore", "S3ObjectStore", "check_key", "is_transient", "open_object_store",
    "split_s3_uri",
]

T = TypeVar("T")

# Temporary files of atomic local writes start with this; list() never returns them.
_TMP_PREFIX = TMP_PREFIX
# The folder backend's compare-and-swap guard files start with this; list() never returns them.
_CAS_PREFIX = ".cas-"
_HIDDEN = (_TMP_PREFIX, _CAS_PREFIX)
# File times come from the kernel's coarse clock (a few ms): an age is reported this much short.
_FS_STAMP_SLACK_S = 0.02


@runtime_checkable
class ObjectStore(Protocol):
    """Bytes under relative keys, with atomic writes and create-if-absent."""

    def get(self, key: str) -> bytes | None:
        """The bytes under ``key``, or None if there are none."""
        ...

    def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key`` atomically, replacing what was there."""
        ...

    def put_if_absent(self, key: str, data: bytes) -> bool:
        """Store ``data`` under ``key`` only if the key does not exist; True if this call created it."""
        ...

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their version, or None if there are none."""
        ...

    def get_versioned_aged(self, key: str) -> tuple[bytes, str, float] | None:
        """Like :meth:`get_versioned`, plus how many seconds ago that version was written, at least,
        measured on the store's own clock (the file system's, or the S3 service's): hosts whose clocks
        disagree read the same age. None if there are none."""
        ...

    def put_if_version(self, key: str, data: bytes, version: str | None) -> str | None:
        """Store ``data`` under ``key`` only if the key is still at ``version`` (``None``: only if the
        key is absent). Returns the new version, or None when the key has moved on (nothing written)."""
        ...

    def delete_if_version(self, key: str, version: str) -> bool:
        """Remove ``key`` only if it is still at ``version``; True if this call removed it."""
        ...

    def delete(self, key: str) -> None:
        """Remove ``key``; a missing key is not an error."""
        ...

    def list(self, prefix: str = "") -> list[str]:
        """Sorted keys that start with ``prefix``."""
        ...

    def exists(self, key: str) -> bool:
        """Whether ``key`` holds an object."""
        ...

    def describe(self) -> str:
        """Where the store is, for messages (never credentials)."""
        ...

    #: Whether a read is a network round trip (S3) rather than a file read: readers cache what they may.
    remote: bool


def open_object_store(uri: str, endpoint_url: str | None = None) -> ObjectStore:
    """A local folder path or ``s3://bucket/prefix``. ``endpoint_url`` selects an S3-compatible
    server (MinIO, a test server); credentials come from the environment only."""
    if uri.startswith("s3://"):
        bucket, prefix = split_s3_uri(uri)
        return S3ObjectStore(bucket, prefix, endpoint_url=endpoint_url)
    if "://" in uri:
        raise StateError(f"state location {uri!r}: unsupported scheme; use a local folder or s3://bucket/prefix")
    return LocalObjectStore(uri)


def split_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → ``("bucket", "a/b/")``; the prefix is a folder (ends with ``/``) or empty."""
    rest = uri.removeprefix("s3://")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise StateError(f"{uri!r}: no bucket name; expected s3://bucket/prefix")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def check_key(key: str) -> str:
    """Reject keys that could escape the store or mean different things on the two backends."""
    parts = key.split("/")
    if (
        not key
        or key.startswith("/")
        or "\\" in key
        or "\0" in key
        or any(p in ("", ".", "..") for p in parts)
        or parts[-1].startswith(_HIDDEN)
    ):
        raise StateError(
            f"invalid object key {key!r}: use a relative path like 'plans/x.json' (no leading '/', "
            f"no '.' or '..' parts, no empty parts, no names starting with {_TMP_PREFIX!r} or {_CAS_PREFIX!r})"
        )
    return key


# --------------------------------------------------------------------------------------------
# Reads that a process makes twice: kept by signature
# --------------------------------------------------------------------------------------------

#: The most bytes a store keeps of objects read through ``get_cached`` (least recently used first out).
CACHE_BYTES = 64 * 2**20


class _SignedCache:
    """Objects this store read (or wrote under the index lock), kept with their signature: ``get_cached`` asks the
    store for the signature only (a ``stat``, a HEAD) and answers from memory while it is the same. A plan, then its
    apply's shard, then the next cycle of a live mode read a manifest part once between its writes, not each time."""

    def _cache_init(self) -> None:
        from collections import OrderedDict

        self._cached: OrderedDict[str, tuple[str, bytes]] = OrderedDict()
        self._cached_bytes = 0
        self._cache_lock = threading.Lock()

    def remember(self, key: str, data: bytes, signature: str | None) -> None:
        """Keep ``data`` as the bytes of ``key`` while its signature is ``signature`` (None: forget it)."""
        with self._cache_lock:
            old = self._cached.pop(key, None)
            if old is not None:
                self._cached_bytes -= len(old[1])
            if signature is None or len(data) > CACHE_BYTES // 4:
                return
            self._cached[key] = (signature, data)
            self._cached_bytes += len(data)
            while self._cached_bytes > CACHE_BYTES and self._cached:
                _, (_, dropped) = self._cached.popitem(last=False)
                self._cached_bytes -= len(dropped)

    def get_cached(self, key: str) -> bytes | None:
        """:meth:`get`, answered from memory when the object's signature has not moved since this store read it."""
        sig = self.signature(key)  # type: ignore[attr-defined]
        if sig is None:
            self.remember(key, b"", None)
            return None
        with self._cache_lock:
            hit = self._cached.get(key)
            if hit is not None and hit[0] == sig:
                self._cached.move_to_end(key)
                return hit[1]
        got = self.get_signed(key)  # type: ignore[attr-defined]
        if got is None:
            return None
        self.remember(key, got[0], got[1])
        return got[0]


# --------------------------------------------------------------------------------------------
# Local folder
# --------------------------------------------------------------------------------------------


class LocalObjectStore(_SignedCache):
    """Objects as files under a folder. Atomic puts via temp file + fsync + rename; create-if-absent
    via a hard link of a fully written temp file (the link fails if the name exists).

    Compare-and-swap: a key's version is a digest of its bytes. ``put_if_version`` and
    ``delete_if_version`` hold an exclusive ``flock`` on a guard file beside the key (``.cas-<name>``)
    from reading the current bytes until the rename or unlink is done. Every conditional write of that
    key takes the same guard, so none can slip in between another's compare and its swap: the guard
    serialises them across threads and processes (``flock`` belongs to the open file, and each call
    opens the guard afresh). Guard files are never deleted (deleting one would let two writers each
    lock a different file). Plain ``put`` and ``delete`` do not take the guard: a key used for
    compare-and-swap must only be written with the conditional calls. Needs a filesystem where
    ``flock`` excludes other processes (any local one; NFS only with working lock support)."""

    remote = False  # a read costs a file read, not a network round trip

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(os.path.expanduser(root))
        self._cache_init()

    def describe(self) -> str:
        return f"folder {self.root}"

    def location(self) -> tuple[str, str | None]:
        """What :func:`open_object_store` opens this store again from, in another process: (uri, endpoint)."""
        return str(self.root.resolve()), None

    def describe_key(self, key: str) -> str:
        """One object of this store, for messages: ``the file /path/to/key``."""
        return f"the file {self.root / key}"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> bytes | None:
        path = self._path(key)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as err:
            raise StateError(f"cannot read {path}: {err.strerror or err}") from None

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            atomic_write(path, data)
        except OSError as err:
            raise StateError(f"cannot write {path}: {err.strerror or err}") from None

    def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        try:
            if path.exists():
                return False
            tmp = write_temp(path, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            except OSError:
                # No hard links on this filesystem: exclusive create (content may be visible
                # half-written for an instant, but only one writer ever wins).
                return _create_exclusive(path, data)
            finally:
                tmp.unlink(missing_ok=True)
            fsync_dir(path.parent)
            return True
        except OSError as err:
            raise StateError(f"cannot write {path}: {err.strerror or err}") from None

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        # A rename replaces the file whole, so one read sees one version's bytes; no guard needed.
        data = self.get(key)
        return None if data is None else (data, _digest(data))

    def get_versioned_aged(self, key: str) -> tuple[bytes, str, float] | None:
        # The file's modification time and a probe file's, both stamped by the file system now and at
        # the write: one clock, whichever host wrote the key or reads it.
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                written = os.fstat(f.fileno()).st_mtime_ns
                data = f.read()
            now = _file_system_now(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as err:
            raise StateError(f"cannot read {path}: {err.strerror or err}") from None
        return data, _digest(data), max(0.0, (now - written) / 1e9 - _FS_STAMP_SLACK_S)

    def put_if_version(self, key: str, data: bytes, version: str | None) -> str | None:
        path = self._path(key)
        try:
            with _cas_guard(path):
                if version is None:
                    # The hard link also excludes put_if_absent, which does not take the guard.
                    return _digest(data) if self.put_if_absent(key, data) else None
                current = self.get(key)
                if current is None or _digest(current) != version:
                    return None
                atomic_write(path, data)
                return _digest(data)
        except OSError as err:
            raise StateError(f"cannot write {path}: {err.strerror or err}") from None

    def delete_if_version(self, key: str, version: str) -> bool:
        path = self._path(key)
        try:
            with _cas_guard(path):
                current = self.get(key)
                if current is None or _digest(current) != version:
                    return False
                path.unlink()
                fsync_dir(path.parent)
                return True
        except OSError as err:
            raise StateError(f"cannot delete {path}: {err.strerror or err}") from None

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            path.unlink(missing_ok=True)
        except IsADirectoryError:
            return
        except OSError as err:
            raise StateError(f"cannot delete {path}: {err.strerror or err}") from None

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.iter_keys(prefix))

    def signatures(self, prefix: str) -> dict[str, str]:
        """Key → signature of the objects directly in the folder ``prefix`` names (one ``stat`` each, no byte read):
        the signature :meth:`get_signed` returns with an object's bytes, unchanged while its bytes are (a write
        replaces the file: new inode, and its change time moves; ``ctime`` cannot be set back)."""
        folder, _, start = prefix.rpartition("/")
        out = {}
        try:
            with os.scandir(self.root / folder if folder else self.root) as entries:
                for e in entries:
                    if e.name.startswith(_HIDDEN) or not e.name.startswith(start) or not e.is_file(follow_symlinks=False):
                        continue
                    try:
                        out[f"{folder}/{e.name}" if folder else e.name] = _signature(e.stat(follow_symlinks=False))
                    except FileNotFoundError:
                        continue
        except (FileNotFoundError, NotADirectoryError):
            return {}
        except OSError as err:
            raise StateError(f"cannot list {self.root / folder}: {err.strerror or err}") from None
        return out

    def signature(self, key: str) -> str | None:
        """The signature of one object (:meth:`signatures`), None when there is none."""
        try:
            return _signature(os.stat(self._path(key), follow_symlinks=False))
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            raise StateError(f"cannot read {self.root / key}: {err.strerror or err}") from None

    def get_signed(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their signature (:meth:`signatures`), from one open file: they belong together."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                sig = _signature(os.fstat(f.fileno()))
                return f.read(), sig
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        except OSError as err:
            raise StateError(f"cannot read {path}: {err.strerror or err}") from None

    def iter_keys(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` (unsorted; :meth:`list` sorts)."""
        # Only walk the folder the prefix names; the rest of the prefix filters names.
        folder = prefix.rpartition("/")[0]
        start = self.root / folder if folder else self.root
        if not start.is_dir():
            return
        for dirpath, dirnames, filenames in os.walk(start):
            dirnames.sort()
            rel_dir = Path(dirpath).relative_to(self.root).as_posix()
            for name in filenames:
                if name.startswith(_HIDDEN):
                    continue
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    yield key


def _signature(st: os.stat_result) -> str:
    """A file's signature: inode, size, modification and change times (ns)."""
    return f"f:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _file_system_now(path: Path) -> int:
    """Now on the clock that stamps ``path``'s folder (ns): a probe file's modification time. A folder this process may
    not write to (a read-only mount, a reader's permissions: ``reindex doctor`` there) has no probe: this host's
    clock, which stamps a local file system's files too (only a network mount written by other hosts can differ)."""
    probe = path.with_name(f"{_TMP_PREFIX}clock-{uuid.uuid4().hex}")
    try:
        with open(probe, "wb"):
            pass
    except OSError as err:
        if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return time.time_ns()
        raise
    try:
        return os.stat(probe).st_mtime_ns
    finally:
        probe.unlink(missing_ok=True)


def _digest(data: bytes) -> str:
    """The folder backend's version of some bytes (like an ETag: equal bytes, equal version)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


@contextmanager
def _cas_guard(path: Path) -> Iterator[None]:
    """Hold the exclusive ``flock`` of ``path``'s guard file; released when the file is closed."""
    make_folders(path.parent)
    fd = os.open(path.parent / f"{_CAS_PREFIX}{path.name}", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _create_exclusive(path: Path, data: bytes) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    return True


# --------------------------------------------------------------------------------------------
# S3
# --------------------------------------------------------------------------------------------

_THROTTLING = {
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "SlowDown",
    "RequestLimitExceeded",
    "RequestTimeout",
    "RequestTimeoutException",
    "InternalError",
    "ServiceUnavailable",
}
_PRECONDITION = {"PreconditionFailed", "ConditionalRequestConflict"}
_NOT_FOUND = {"NoSuchKey", "404", "NotFound"}


def is_transient(err: BaseException) -> bool:
    """Connection errors, timeouts, throttling and 5xx responses may succeed on retry."""
    if isinstance(err, (bex.ConnectionError, bex.HTTPClientError)):
        return True
    if isinstance(err, bex.ClientError):
        code = _code(err)
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return code in _THROTTLING or status == 429 or status >= 500
    return False


def _code(err: bex.ClientError) -> str:
    return str(err.response.get("Error", {}).get("Code", ""))


class S3ObjectStore(_SignedCache):
    """Objects under ``s3://bucket/prefix``. Transient failures are retried with exponential backoff
    and jitter (``attempts`` in all) and then raise TransientError; other failures raise StateError."""

    remote = True  # every read is a round trip: readers cache what they may

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        attempts: int = 5,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        connect_timeout_s: float = 10.0,
        read_timeout_s: float = 60.0,
    ) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/") + "/" if prefix.strip("/") else ""
        self.endpoint_url = endpoint_url
        self._attempts = attempts
        self._backoff_s = backoff_s
        self._max_backoff_s = max_backoff_s
        self._cache_init()
        import boto3  # ~0.1 CPU-s: only a state on S3 pays it
        from botocore.config import Config

        # Retries are ours (tenacity); botocore's own retries would multiply them.
        config = Config(retries={"total_max_attempts": 1}, connect_timeout=connect_timeout_s,
                        read_timeout=read_timeout_s)
        try:
            self._client: Any = boto3.session.Session().client("s3", endpoint_url=endpoint_url, config=config)
        except bex.BotoCoreError as err:
            raise StateError(f"cannot set up an S3 client for {self.describe()}: {err}") from None

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}"
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def location(self) -> tuple[str, str | None]:
        """What :func:`open_object_store` opens this store again from, in another process: (uri, endpoint)."""
        return f"s3://{self.bucket}/{self.prefix}", self.endpoint_url

    def describe_key(self, key: str) -> str:
        """One object of this store, for messages: ``the object s3://bucket/prefix/key``."""
        where = f"the object s3://{self.bucket}/{self.prefix}{key}"
        return f"{where} at {self.endpoint_url}" if self.endpoint_url else where

    def _key(self, key: str) -> str:
        return self.prefix + check_key(key)

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return call_with_retries(fn, attempts=self._attempts, retry_if=is_transient, initial_s=self._backoff_s,
                                     max_s=self._max_backoff_s, full_jitter=True, reraise=False)
        except RetriesExhausted as err:
            last = err.last
            raise TransientError(
                f"{what} on {self.describe()} still failing after {self._attempts} attempts: {_one_line(last)}; "
                "check that the S3 endpoint is reachable, then retry"
            ) from None
        except bex.NoCredentialsError:
            raise StateError(
                f"{what} on {self.describe()}: no S3 credentials; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) in the environment"
            ) from None
        except bex.ClientError as err:
            code = _code(err)
            if code == "NoSuchBucket":
                raise StateError(f"{what}: bucket {self.bucket!r} does not exist ({self.describe()}); create it first") from None
            raise StateError(f"{what} on {self.describe()} failed: {_one_line(err)}") from None
        except bex.BotoCoreError as err:
            raise StateError(f"{what} on {self.describe()} failed: {_one_line(err)}") from None

    def _get_object(self, key: str) -> tuple[bytes, dict] | None:
        """An object's bytes and its GetObject response (None when it does not exist), retried like every call."""
        full = self._key(key)

        def op() -> tuple[bytes, dict] | None:
            try:
                resp = self._client.get_object(Bucket=self.bucket, Key=full)
            except bex.ClientError as err:
                if _code(err) in _NOT_FOUND:
                    return None
                raise
            with resp["Body"] as body:
                return body.read(), resp

        return self._call(f"get {key!r}", op)

    def get(self, key: str) -> bytes | None:
        got = self._get_object(key)
        return None if got is None else got[0]

    def get_with_metadata(self, key: str) -> tuple[bytes, dict[str, str], str] | None:
        """An object's bytes, its user metadata (``x-amz-meta-*``, names lower-case without the prefix) and
        its last-modified time (UTC ISO-8601); None when it does not exist."""
        got = self._get_object(key)
        if got is None:
            return None
        data, resp = got
        modified = resp.get("LastModified")
        stamp = modified.astimezone(_dt.UTC).isoformat().replace("+00:00", "Z") if modified else ""
        return data, {str(k).lower(): str(v) for k, v in (resp.get("Metadata") or {}).items()}, stamp

    def exists(self, key: str) -> bool:
        full = self._key(key)

        def op() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=full)
            except bex.ClientError as err:
                if _code(err) in _NOT_FOUND:
                    return False
                raise
            return True

        return self._call(f"head {key!r}", op)

    def put(self, key: str, data: bytes) -> None:
        full = self._key(key)
        self._call(f"put {key!r}", lambda: self._client.put_object(Bucket=self.bucket, Key=full, Body=data))

    def put_if_absent(self, key: str, data: bytes) -> bool:
        full = self._key(key)

        def op() -> bool:
            try:
                self._client.put_object(Bucket=self.bucket, Key=full, Body=data, IfNoneMatch="*")
            except bex.ClientError as err:
                if _code(err) in _PRECONDITION:
                    return False
                raise
            return True

        return self._call(f"conditional put {key!r}", op)

    def get_versioned(self, key: str) -> tuple[bytes, str] | None:
        got = self._get_object(key)
        return None if got is None else (got[0], got[1]["ETag"])

    def get_versioned_aged(self, key: str) -> tuple[bytes, str, float] | None:
        # LastModified and the reply's Date header are both the service's clock, in whole seconds:
        # one second less than their difference is a lower bound. Without either, age 0 (never stale).
        got = self._get_object(key)
        if got is None:
            return None
        data, resp = got
        modified = resp.get("LastModified")
        date = (resp.get("ResponseMetadata") or {}).get("HTTPHeaders", {}).get("date")
        age = 0.0
        if modified is not None and date:
            try:
                now = email.utils.parsedate_to_datetime(date)
                age = max(0.0, (now - modified).total_seconds() - 1.0)
            except (TypeError, ValueError):
                age = 0.0
        return data, got[1]["ETag"], age

    def put_if_version(self, key: str, data: bytes, version: str | None) -> str | None:
        # If-Match / If-None-Match on PUT: S3 compares and writes in one step on the server. A retry
        # after a lost reply answers "precondition failed" for a write that did land: callers that
        # must know read the key back and look for their own bytes.
        full = self._key(key)
        cond = {"IfNoneMatch": "*"} if version is None else {"IfMatch": version}

        def op() -> str | None:
            try:
                resp = self._client.put_object(Bucket=self.bucket, Key=full, Body=data, **cond)
            except bex.ClientError as err:
                if _code(err) in _PRECONDITION or _code(err) in _NOT_FOUND:
                    return None
                raise
            return str(resp["ETag"])

        return self._call(f"conditional put {key!r}", op)

    def delete_if_version(self, key: str, version: str) -> bool:
        full = self._key(key)

        def op() -> bool:
            try:
                self._client.delete_object(Bucket=self.bucket, Key=full, IfMatch=version)
            except bex.ClientError as err:
                if _code(err) in _PRECONDITION or _code(err) in _NOT_FOUND:
                    return False
                raise
            return True

        return self._call(f"conditional delete {key!r}", op)

    def delete(self, key: str) -> None:
        full = self._key(key)
        self._call(f"delete {key!r}", lambda: self._client.delete_object(Bucket=self.bucket, Key=full))

    def list(self, prefix: str = "") -> list[str]:
        return sorted(self.iter_keys(prefix))

    def signatures(self, prefix: str) -> dict[str, str]:
        """Key → signature (the ETag: a digest of the bytes) of the objects directly under the folder ``prefix``
        names, from the listing: no object is read."""
        folder = prefix.rpartition("/")[0]
        return {key: f"e:{etag}" for key, etag, _, _ in self.iter_listing(prefix)
                if key.rpartition("/")[0] == folder}

    def signature(self, key: str) -> str | None:
        """The signature of one object (its ETag, from a HEAD: no body), None when there is none."""
        full = self._key(key)

        def op() -> str | None:
            try:
                return f"e:{self._client.head_object(Bucket=self.bucket, Key=full)['ETag']}"
            except bex.ClientError as err:
                if _code(err) in _NOT_FOUND:
                    return None
                raise

        return self._call(f"head {key!r}", op)

    def get_signed(self, key: str) -> tuple[bytes, str] | None:
        """The bytes under ``key`` and their signature (:meth:`signatures`), from one GET."""
        got = self._get_object(key)
        return None if got is None else (got[0], f"e:{got[1]['ETag']}")

    def iter_keys(self, prefix: str = "") -> Iterator[str]:
        """Keys under ``prefix`` in S3's order (UTF-8 byte order, which equals sorted order), one
        listing page at a time; a failed page is retried on its own."""
        for key, _, _, _ in self.iter_listing(prefix):
            yield key

    def iter_listing(self, prefix: str = "") -> Iterator[tuple[str, str, str, int]]:
        """(key, ETag, LastModified as UTC ISO-8601, size) of each object under ``prefix``, as
        :meth:`iter_keys` lists them: what a listing cursor compares, no object read."""
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": self.prefix + prefix}
            if token:
                kwargs["ContinuationToken"] = token
            page = self._call(f"list {prefix!r}", lambda: self._client.list_objects_v2(**kwargs))
            for item in page.get("Contents", ()):
                key = item["Key"][len(self.prefix) :]
                if key and not key.endswith("/"):
                    modified = item.get("LastModified")
                    stamp = modified.astimezone(_dt.UTC).isoformat().replace("+00:00", "Z") if modified else ""
                    yield key, str(item.get("ETag", "")), stamp, int(item.get("Size", 0))
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")


def _one_line(err: BaseException | None) -> str:
    return " ".join(str(err).split()) if err is not None else "unknown error"
