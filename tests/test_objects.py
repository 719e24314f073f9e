"""The object store against a local folder and a loopback S3 server, with the same tests."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from helpers_locks import serialise_moto_writes

from reindex.errors import StateError, TransientError
from reindex.adapters.stores.objects import (
    LocalObjectStore,
    ObjectStore,
    S3ObjectStore,
    open_object_store,
    split_s3_uri,
)


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_object_store(str(tmp_path / "state"))
    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    serialise_moto_writes(request.getfixturevalue("monkeypatch"))  # atomic conditional writes, as on S3
    return open_object_store(f"s3://{bucket}/team/state", endpoint_url=endpoint)


def test_both_backends_implement_the_whole_protocol(store: ObjectStore) -> None:
    """The Protocol declares the contract (no implementation inside it) and both stores meet it."""
    members = {"get", "put", "put_if_absent", "get_versioned", "put_if_version", "delete_if_version", "delete", "list",
               "exists", "describe"}
    assert members <= set(dir(ObjectStore)) and isinstance(store, ObjectStore)
    assert not [n for n in vars(ObjectStore) if n.startswith("_") and not n.startswith("__") and callable(vars(ObjectStore)[n])]


def test_get_missing_is_none(store: ObjectStore) -> None:
    assert store.get("plans/nothing.json") is None
    assert not store.exists("plans/nothing.json")


def test_put_get_overwrite(store: ObjectStore) -> None:
    store.put("plans/a.json", b'{"v": 1}')
    assert store.get("plans/a.json") == b'{"v": 1}'
    store.put("plans/a.json", b'{"v": 2}')
    assert store.get("plans/a.json") == b'{"v": 2}'
    assert store.exists("plans/a.json")


def test_keys_with_slashes_and_listing(store: ObjectStore) -> None:
    keys = ["manifests/pop1/shard-0002.json", "manifests/pop1/shard-0001.json", "plans/p.json", "lock", "manifests/pop2/x"]
    for k in keys:
        store.put(k, k.encode())
    assert store.list() == sorted(keys)
    assert store.list("manifests/pop1/") == ["manifests/pop1/shard-0001.json", "manifests/pop1/shard-0002.json"]
    assert store.list("manifests/pop") == ["manifests/pop1/shard-0001.json", "manifests/pop1/shard-0002.json", "manifests/pop2/x"]
    assert store.list("nothing/") == []
    for k in keys:
        assert store.get(k) == k.encode()


def test_put_if_absent(store: ObjectStore) -> None:
    assert store.put_if_absent("locks/docs.lock", b"owner-a") is True
    assert store.put_if_absent("locks/docs.lock", b"owner-b") is False
    assert store.get("locks/docs.lock") == b"owner-a"
    store.delete("locks/docs.lock")
    assert store.put_if_absent("locks/docs.lock", b"owner-b") is True
    assert store.get("locks/docs.lock") == b"owner-b"


def test_put_if_absent_has_one_winner_under_contention(store: ObjectStore) -> None:
    results: list[bool] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        results.append(store.put_if_absent("locks/race", f"owner-{i}".encode()))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == [False] * 7 + [True]
    winner = store.get("locks/race")
    assert winner is not None and winner.startswith(b"owner-")


def test_compare_and_swap(store: ObjectStore) -> None:
    assert store.get_versioned("locks/l") is None
    assert store.put_if_version("locks/l", b"a", "no-such-version") is None
    assert store.get("locks/l") is None
    v1 = store.put_if_version("locks/l", b"a", None)  # None: only if absent
    assert v1 is not None and store.get_versioned("locks/l") == (b"a", v1)
    assert store.put_if_version("locks/l", b"b", None) is None
    v2 = store.put_if_version("locks/l", b"b", v1)
    assert v2 is not None and v2 != v1 and store.get_versioned("locks/l") == (b"b", v2)
    assert store.put_if_version("locks/l", b"c", v1) is None, "a stale version must not write"
    assert store.get("locks/l") == b"b"
    assert store.delete_if_version("locks/l", v1) is False
    assert store.get("locks/l") == b"b"
    assert store.delete_if_version("locks/l", v2) is True
    assert store.get_versioned("locks/l") is None
    assert store.delete_if_version("locks/l", v2) is False
    assert store.list() == [], "guard files must not show up as keys"


def test_compare_and_swap_has_one_winner_under_contention(store: ObjectStore) -> None:
    base = store.put_if_version("locks/cas", b"base", None)
    results: list[str | None] = []
    barrier = threading.Barrier(8)

    def contend(i: int) -> None:
        barrier.wait()
        results.append(store.put_if_version("locks/cas", f"owner-{i}".encode(), base))

    threads = [threading.Thread(target=contend, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    won = [r for r in results if r is not None]
    assert len(won) == 1 and len(results) == 8
    got = store.get_versioned("locks/cas")
    assert got is not None and got[1] == won[0] and got[0].startswith(b"owner-")


def test_delete_is_idempotent(store: ObjectStore) -> None:
    store.put("a/b", b"x")
    store.delete("a/b")
    store.delete("a/b")
    assert store.get("a/b") is None
    assert store.list() == []


@pytest.mark.parametrize("key", ["", "/abs", "a/../b", "a//b", "./a", "a\\b", "a/.tmp-x", "a/.cas-x"])
def test_bad_keys_are_refused(store: ObjectStore, key: str) -> None:
    with pytest.raises(StateError, match="invalid object key"):
        store.put(key, b"x")


def test_describe_names_the_location(store: ObjectStore) -> None:
    text = store.describe()
    assert "state" in text
    assert "testing" not in text  # never the credentials


def test_local_put_leaves_no_temp_files(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    for i in range(5):
        store.put("x/y.json", str(i).encode())
        store.put_if_absent("x/z.json", b"z")
    assert sorted(p.name for p in (tmp_path / "x").iterdir()) == ["y.json", "z.json"]
    assert (tmp_path / "x" / "y.json").read_bytes() == b"4"


def test_local_list_ignores_interrupted_writes(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path)
    store.put("plans/a.json", b"a")
    (tmp_path / "plans" / ".tmp-b.json.deadbeef").write_bytes(b"half")  # a crashed writer's leftover
    assert store.list() == ["plans/a.json"]


def test_split_s3_uri() -> None:
    assert split_s3_uri("s3://bucket") == ("bucket", "")
    assert split_s3_uri("s3://bucket/") == ("bucket", "")
    assert split_s3_uri("s3://bucket/a/b") == ("bucket", "a/b/")
    assert split_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    with pytest.raises(StateError, match="no bucket name"):
        split_s3_uri("s3:///x")


def test_unsupported_scheme() -> None:
    with pytest.raises(StateError, match="unsupported scheme"):
        open_object_store("gs://bucket/x")


def test_s3_prefix_isolates_stores(s3_server: str, s3_bucket: str) -> None:
    a = open_object_store(f"s3://{s3_bucket}/a", endpoint_url=s3_server)
    ab = open_object_store(f"s3://{s3_bucket}/ab", endpoint_url=s3_server)
    a.put("k", b"1")
    ab.put("k", b"2")
    assert a.list() == ["k"] and a.get("k") == b"1"
    assert ab.list() == ["k"] and ab.get("k") == b"2"


def test_s3_listing_pages(s3_server: str, s3_bucket: str) -> None:
    store = open_object_store(f"s3://{s3_bucket}/many", endpoint_url=s3_server)
    keys = [f"k/{i:05d}" for i in range(1005)]  # more than one 1,000-key page
    for k in keys:
        store.put(k, b"")
    assert store.list() == keys


def test_s3_missing_bucket_is_a_state_error(s3_server: str) -> None:
    store = open_object_store("s3://no-such-bucket-here/x", endpoint_url=s3_server)
    with pytest.raises(StateError, match="no-such-bucket-here"):
        store.put("k", b"1")


def test_s3_unreachable_endpoint_is_transient_after_retries(s3_server: str) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nothing listens on `port` any more: every attempt is refused.
    store = S3ObjectStore("bucket", "x", endpoint_url=f"http://127.0.0.1:{port}", attempts=3, backoff_s=0.01)
    with pytest.raises(TransientError, match="after 3 attempts"):
        store.get("k")


def test_s3_retries_throttling_then_succeeds(s3_server: str, s3_bucket: str) -> None:
    """Fault injection wraps the real client: two SlowDown responses, then the real call."""
    import botocore.exceptions as bex

    store = S3ObjectStore(s3_bucket, "p", endpoint_url=s3_server, backoff_s=0.01)
    store.put("k", b"v")
    real = store._client
    failures = iter([503, 503])

    class Flaky:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(real, name)

        def get_object(self, **kwargs):  # type: ignore[no-untyped-def]
            status = next(failures, None)
            if status is not None:
                raise bex.ClientError(
                    {"Error": {"Code": "SlowDown", "Message": "slow down"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                    "GetObject",
                )
            return real.get_object(**kwargs)

    store._client = Flaky()
    assert store.get("k") == b"v"
    assert next(failures, None) is None


def test_s3_access_denied_is_not_retried(s3_server: str, s3_bucket: str) -> None:
    import botocore.exceptions as bex

    store = S3ObjectStore(s3_bucket, "p", endpoint_url=s3_server, backoff_s=0.01)
    calls = []

    class Denied:
        def get_object(self, **kwargs):  # type: ignore[no-untyped-def]
            calls.append(kwargs)
            raise bex.ClientError(
                {"Error": {"Code": "AccessDenied", "Message": "denied"}, "ResponseMetadata": {"HTTPStatusCode": 403}},
                "GetObject",
            )

    store._client = Denied()
    with pytest.raises(StateError, match="AccessDenied"):
        store.get("k")
    assert len(calls) == 1


def test_s3_server_errors_are_transient_by_status_whatever_their_code() -> None:
    # Found by the sampled mutmut run: only throttling codes were tested. A 5xx (or 429) is retried whatever
    # its error code; a 4xx is not.
    import botocore.exceptions as bex

    from reindex.adapters.stores.objects import is_transient

    def err(code: str, status: int) -> Exception:
        return bex.ClientError({"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}},
                               "PutObject")

    assert is_transient(err("InternalError", 500)) and is_transient(err("SomethingNew", 503))
    assert is_transient(err("SomethingNew", 429))
    assert not is_transient(err("NoSuchKey", 404)) and not is_transient(err("PreconditionFailed", 412))
