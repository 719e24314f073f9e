"""Identity: the text/vector split is complete in both directions, canonical and versioned."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from reindex.domain.config import (
    ApplyConfig,
    ApprovalConfig,
    CdcChunkerConfig,
    CostConfig,
    CutoverConfig,
    ServingConfig,
    SyncConfig,
    EmbedConfig,
    NormaliserConfig,
    PayloadConfig,
    PipelineConfig,
    RechunkConfig,
    SlidingChunkerConfig,
    SourceConfig,
    StateConfig,
    StoreConfig,
    TextHalf,
    VectorHalf,
    config_from_dict,
)
from reindex.domain.identity import (
    canonical_json,
    collection_name,
    fingerprint,
    identity_of,
    pipeline_id,
    point_id,
    point_ids,
    text_id,
    vector_id,
)

BASE = PipelineConfig(
    index="docs",
    source=SourceConfig(uri="/data/corpus"),
    text=TextHalf(tokenizer_revision="sha256:tok"),
    vector=VectorHalf(revision="sha256:model"),
)

# One alternative value for every field of each half: the test walks all of them, so a field added
# to a half without a row here fails `test_every_field_has_a_mutation`.
TEXT_MUTATIONS = {
    "extractor": ["plain", "html"],
    "normaliser": [
        NormaliserConfig(unicode="NFKC"),
        NormaliserConfig(unicode="none"),
        NormaliserConfig(newlines="keep"),
        NormaliserConfig(strip_trailing_whitespace=True),
    ],
    "chunker": [
        {"kind": "recursive", "size": 256},
        {"kind": "fixed", "size": 304},
        {"kind": "sliding", "size": 256, "overlap": 0.2},
        {"kind": "sliding", "size": 256, "overlap": 0.1},
        {"kind": "cdc"},
        {"kind": "cdc", "window": 16},
        {"kind": "paragraph"},
        {"kind": "markdown"},
        {"kind": "sentence"},
        {"kind": "fixed_chars"},
        {"kind": "anchored", "size": 200},
        {"kind": "langchain", "splitter": "langchain_text_splitters.RecursiveCharacterTextSplitter", "version": "x==1"},
        {"kind": "langchain", "splitter": "langchain_text_splitters.RecursiveCharacterTextSplitter", "version": "x==2"},
        {"kind": "langchain", "splitter": "langchain_text_splitters.RecursiveCharacterTextSplitter", "version": "x==1",
         "params": {"chunk_size": 800}},
        {"kind": "callable", "callable": "m:f", "version": "sha256:a"},
        {"kind": "callable", "callable": "m:g", "version": "sha256:a"},
        {"kind": "callable", "callable": "m:f", "version": "sha256:a", "params": {"n": 1}},
    ],
    "tokenizer": ["whitespace", "char", "/models/other"],
    "tokenizer_revision": ["sha256:other"],
    "rechunk": [
        RechunkConfig(mode="sticky"),
        RechunkConfig(mode="sticky", max_drift=0.5),
        RechunkConfig(mode="sticky", min_share=0.1),
        RechunkConfig(mode="sticky", max_out_of_bounds=0.3),
        RechunkConfig(max_drift=0.5),
    ],
}
VECTOR_MUTATIONS = {
    "provider": ["openai", "hash"],
    "revision": ["sha256:model2", "2024-01-25"],
    "dimension": [768, 1536],
    "prefix": ["passage: ", "query: "],
    "normalize": [False],
    "distance": ["dot", "euclid"],
    "params": [{"model": "m-2"}],  # a langchain/llamaindex class's arguments (empty: left out of the id)
    "backend": ["onnx"],  # api is for HTTP providers: the base half is sentence-transformers
    "precision": ["float16"],  # int8 needs backend onnx (a two-field change: tests/test_embed_backends.py)
    "max_tokens": [128, 512],
    "compose": ["units"],  # vectors composed from units (issue 45)
}
# Vector-half fields that change no id: a local model is identified by the digest of its files (BASE's
# revision), its name or path is for display; query_prefix changes queries, not stored vectors.
DISPLAY_MUTATIONS = {
    "model": ["/models/e5-small", "sentence-transformers/all-MiniLM-L6-v2"],
    "query_prefix": ["query: ", ""],
    "compose_unit": ["sentence:min=3", "chunk"],  # how units are cut: in no id while compose is none (BASE's)
}
OPERATIONAL_MUTATIONS = {
    "index": ["other-index"],
    "source": [SourceConfig(uri="s3://bucket/prefix"), SourceConfig(uri="/elsewhere", text_field="body")],
    "store": [StoreConfig(url="http://qdrant:6333"), StoreConfig(path="/x", shard_number=3), StoreConfig(quantization="int8"),
              StoreConfig(quantization="int8", oversampling=4)],
    "state": [StateConfig(uri="s3://state/reindex")],
    "cost": [CostConfig(usd_per_mtok=0.02, tokens_per_minute=3.5e6)],
    "approval": [ApprovalConfig(pipeline_scoped=False, max_usd=100)],
    "apply": [ApplyConfig(shards=4, embed_batch_size=8)],
    "cutover": [CutoverConfig(k=5, min_overlap=0.9, retention_days=1)],
    "sync": [SyncConfig(verify_every="7d")],
    "serving": [ServingConfig(mode="old", min_delta=0.05, candidates=20, every_shards=2)],
    "embed": [EmbedConfig(base_url="http://127.0.0.1:9/v1", api_key_env="MY_KEY", max_tokens_per_minute=1000),
              EmbedConfig(device="cuda:1")],
    "payload": [PayloadConfig(content_key="text_body"), PayloadConfig(metadata_key="meta"), PayloadConfig(indexes=["lang"])],
}


def _ids(cfg: PipelineConfig) -> tuple[str, str, str]:
    ident = identity_of(cfg)
    return ident.text_id, ident.vector_id, ident.pipeline_id


def test_every_field_has_a_mutation() -> None:
    assert set(TEXT_MUTATIONS) == set(TextHalf.model_fields)
    assert set(VECTOR_MUTATIONS) | set(DISPLAY_MUTATIONS) == set(VectorHalf.model_fields)
    assert set(OPERATIONAL_MUTATIONS) | {"text", "vector", "version"} == set(PipelineConfig.model_fields)


def _mutations(table: dict) -> list[tuple[str, object]]:
    return [(name, value) for name, values in table.items() for value in values]


@pytest.mark.parametrize(("name", "value"), _mutations(TEXT_MUTATIONS))
def test_text_half_changes_text_id_only(name: str, value: object) -> None:
    if name == "chunker":
        value = TextHalf.model_validate({"chunker": value}).chunker
    changed = BASE.model_copy(update={"text": TextHalf.model_validate({**BASE.text.model_dump(), name: value})})
    t0, v0, p0 = _ids(BASE)
    t1, v1, p1 = _ids(changed)
    if changed.text == BASE.text:  # the mutation equals the default (e.g. recursive:400)
        assert (t1, v1, p1) == (t0, v0, p0)
        return
    assert t1 != t0 and v1 == v0 and p1 != p0


@pytest.mark.parametrize(("name", "value"), _mutations(VECTOR_MUTATIONS))
def test_vector_half_changes_vector_id_only(name: str, value: object) -> None:
    changed = BASE.model_copy(update={"vector": VectorHalf.model_validate({**BASE.vector.model_dump(), name: value})})
    t0, v0, p0 = _ids(BASE)
    t1, v1, p1 = _ids(changed)
    assert v1 != v0 and t1 == t0 and p1 != p0


@pytest.mark.parametrize(("name", "value"), _mutations(DISPLAY_MUTATIONS))
def test_model_name_and_query_prefix_change_no_id(name: str, value: object) -> None:
    changed = BASE.model_copy(update={"vector": VectorHalf.model_validate({**BASE.vector.model_dump(), name: value})})
    assert _ids(changed) == _ids(BASE)


@pytest.mark.parametrize("vector", [
    VectorHalf(provider="openai", model="text-embedding-3-small", revision="2024-01-25", dimension=1536),
    VectorHalf(model="/models/e5-small", revision="v2.0"),  # an explicit revision that is not a content digest
])
def test_model_name_is_the_identity_when_no_content_digest_exists(vector: VectorHalf) -> None:
    other = vector.model_copy(update={"model": "another-model"})
    assert vector_id(other) != vector_id(vector)


@pytest.mark.parametrize(("name", "value"), _mutations(OPERATIONAL_MUTATIONS))
def test_operational_fields_change_neither_id(name: str, value: object) -> None:
    changed = BASE.model_copy(update={name: value})
    assert _ids(changed) == _ids(BASE)


# Hypothesis: arbitrary combinations of values of the two halves.
def _text_half(**kw):
    try:
        return TextHalf(**kw)
    except ValueError:  # sticky with an overlapping chunker is refused by validation
        return None


text_halves = st.builds(
    _text_half,
    extractor=st.sampled_from(["auto", "plain", "html"]),
    normaliser=st.builds(
        NormaliserConfig,
        unicode=st.sampled_from(["NFC", "NFKC", "none"]),
        newlines=st.sampled_from(["lf", "keep"]),
        strip_trailing_whitespace=st.booleans(),
    ),
    chunker=st.one_of(
        st.builds(SlidingChunkerConfig, size=st.integers(1, 4096), overlap=st.sampled_from([0.0, 0.1, 0.2, 0.5])),
        st.builds(CdcChunkerConfig, min=st.integers(1, 100), max=st.integers(100, 300), cap=st.integers(300, 600)),
    ),
    tokenizer=st.sampled_from(["all-MiniLM-L6-v2", "whitespace", "char"]),
    tokenizer_revision=st.text(min_size=1, max_size=8),
    rechunk=st.builds(
        RechunkConfig,
        mode=st.sampled_from(["stateless", "sticky"]),
        max_drift=st.sampled_from([0.25, 0.1, 1.0]),
        min_share=st.sampled_from([0.2, 0.5]),
    ),
).filter(lambda t: t is not None)


def _vector_or_none(fields: dict) -> VectorHalf | None:
    try:
        return VectorHalf(**fields)
    except ValueError:  # a backend/precision pair that cannot run (int8 on torch, …) is refused at load
        return None


vector_halves = st.fixed_dictionaries(dict(
    provider=st.sampled_from(["sentence-transformers", "openai", "hash", "langchain"]),
    model=st.sampled_from(["all-MiniLM-L6-v2", "/m/a", "/m/b"]),
    params=st.sampled_from([{}, {"size": 8}]),
    revision=st.one_of(st.text(min_size=1, max_size=8), st.sampled_from(["sha256:a", "sha256:b"])),
    query_prefix=st.sampled_from([None, "", "query: "]),
    dimension=st.integers(1, 4096),
    prefix=st.text(max_size=10),
    normalize=st.booleans(),
    distance=st.sampled_from(["cosine", "dot", "euclid"]),
    backend=st.sampled_from(["torch", "onnx", "api"]),
    precision=st.sampled_from(["float32", "float16", "int8"]),
)).map(_vector_or_none).filter(lambda v: v is not None)


def _vector_key(v: VectorHalf) -> dict:
    """What identifies stored vectors: all but query_prefix, and the model's name only where no content
    digest of its files stands for it (and never for the hash provider)."""
    d = v.model_dump()
    del d["query_prefix"]
    if v.provider == "hash" or (v.provider == "sentence-transformers" and v.revision.startswith("sha256:")):
        del d["model"]
    return d


@settings(max_examples=200, deadline=None)
@given(t1=text_halves, t2=text_halves, v1=vector_halves, v2=vector_halves)
def test_halves_are_independent(t1: TextHalf, t2: TextHalf, v1: VectorHalf, v2: VectorHalf) -> None:
    assert (text_id(t1) == text_id(t2)) == (t1 == t2)
    assert (vector_id(v1) == vector_id(v2)) == (_vector_key(v1) == _vector_key(v2))
    # Swapping the vector half never moves the text id, and vice versa.
    a = BASE.model_copy(update={"text": t1, "vector": v1})
    b = BASE.model_copy(update={"text": t1, "vector": v2})
    c = BASE.model_copy(update={"text": t2, "vector": v1})
    assert identity_of(a).text_id == identity_of(b).text_id
    assert identity_of(a).vector_id == identity_of(c).vector_id
    assert (pipeline_id(t1, v1) == pipeline_id(t2, v2)) == (t1 == t2 and _vector_key(v1) == _vector_key(v2))


@settings(max_examples=100, deadline=None)
@given(half=text_halves, seed=st.randoms(use_true_random=False), style=st.sampled_from(["block", "flow"]))
def test_key_order_and_yaml_formatting_change_nothing(half: TextHalf, seed, style: str) -> None:
    data = {"index": "docs", "source": "/data/corpus", "text": half.model_dump(mode="json"),
            "vector": BASE.vector.model_dump(mode="json")}

    def shuffle(value):
        if isinstance(value, dict):
            items = list(value.items())
            seed.shuffle(items)
            return {k: shuffle(v) for k, v in items}
        return value

    rendered = yaml.safe_dump(shuffle(data), sort_keys=False, default_flow_style=(style == "flow"), indent=seed.choice([2, 4]))
    cfg = config_from_dict(yaml.safe_load(rendered))
    assert _ids(cfg) == _ids(BASE.model_copy(update={"text": half}))


def test_explicit_defaults_equal_omitted_fields() -> None:
    explicit = config_from_dict(yaml.safe_load(textwrap.dedent("""
        index: docs
        source: /data/corpus
        text: {tokenizer_revision: "sha256:tok", chunker: {kind: recursive, size: 250}, extractor: auto}
        vector: {revision: "sha256:model", dimension: 384, prefix: "", normalize: true}
    """)))
    assert _ids(explicit) == _ids(BASE)


def test_canonical_json_is_stable() -> None:
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


def test_fingerprint_keys_on_vector_id_and_exact_text() -> None:
    vid = vector_id(BASE.vector)
    other = vector_id(BASE.vector.model_copy(update={"revision": "x"}))
    assert fingerprint(vid, "hello") == fingerprint(vid, "hello")
    assert fingerprint(vid, "hello") != fingerprint(vid, "hello ")
    assert fingerprint(vid, "hello") != fingerprint(other, "hello")
    # The separator prevents ambiguity between the id and the text.
    assert fingerprint("ab", "c") != fingerprint("a", "bc")


def test_point_ids_are_deterministic_and_count_occurrences() -> None:
    fps = ["f1", "f2", "f1", "f1"]
    ids = point_ids("doc-1", fps)
    assert ids == point_ids("doc-1", fps)
    assert len(set(ids)) == 4
    assert ids[0] == point_id("doc-1", "f1", 0) and ids[2] == point_id("doc-1", "f1", 1)
    assert point_ids("doc-2", fps)[0] != ids[0]
    # An edit before a repeated chunk does not renumber it: occurrence counts only equal text.
    assert point_ids("doc-1", ["new", "f1"])[1] == ids[0]


def test_collection_name() -> None:
    ident = identity_of(BASE)
    assert ident.collection == collection_name("docs", ident.pipeline_id) == f"docs__{ident.pipeline_id[:12]}"


# The rechunk field came after v1: at its default it is left out of the text id, so populations built
# before it existed keep their ids; sticky (or any other value) is a text change.
def test_default_rechunk_keeps_the_v1_text_id() -> None:
    import hashlib

    data = BASE.text.model_dump(mode="json")
    data.pop("rechunk")
    h = hashlib.blake2b(digest_size=32)
    for part in (b"reindex/text/v1", canonical_json(data).encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    assert text_id(BASE.text) == h.hexdigest()
    sticky = BASE.text.model_copy(update={"rechunk": RechunkConfig(mode="sticky")})
    assert text_id(sticky) != text_id(BASE.text)


def test_rechunk_accepts_a_plain_mode_string() -> None:
    cfg = config_from_dict({"index": "docs", "source": "/data", "text": {"rechunk": "sticky"}})
    assert cfg.text.rechunk == RechunkConfig(mode="sticky")
    with pytest.raises(Exception, match="rechunk"):
        config_from_dict({"index": "docs", "source": "/data", "text": {"rechunk": "sometimes"}})


@pytest.mark.parametrize(("name", "value"), _mutations(OPERATIONAL_MUTATIONS))
def test_payload_id_changes_with_the_payload_section_and_metadata_fields_only(name: str, value: object) -> None:
    from reindex.domain.identity import payload_id

    changed = BASE.model_copy(update={name: value})
    moved = payload_id(changed) != payload_id(BASE)
    assert moved == (name == "payload")
    with_field = BASE.model_copy(update={"source": BASE.source.model_copy(update={"metadata_fields": ["lang"]})})
    assert payload_id(with_field) != payload_id(BASE) and _ids(with_field) == _ids(BASE)


def test_a_record_without_a_payload_section_is_the_legacy_layout() -> None:
    from reindex.domain.identity import LEGACY_PAYLOAD_ID, payload_id, payload_id_of_record

    data = BASE.model_dump(mode="json")
    assert payload_id_of_record(data) == payload_id(BASE)
    del data["payload"]
    assert payload_id_of_record(data) == LEGACY_PAYLOAD_ID


def test_document_hash_is_the_bytes_hash_without_metadata_and_moves_with_a_metadata_value() -> None:
    from reindex.domain.identity import content_hash, document_hash

    assert document_hash(b"abc") == content_hash(b"abc")
    a = document_hash(b"abc", [("lang", "en")])
    assert a != content_hash(b"abc") and a != document_hash(b"abc", [("lang", "de")])
    assert a == document_hash(b"abc", [("lang", "en")]) and a != document_hash(b"abd", [("lang", "en")])


def test_the_config_digest_ignores_where_things_live_but_not_what_is_built() -> None:
    """Issue 22: apply's drift check compares this digest; a moved workspace (other absolute source,
    state and store paths) is the same plan, as the planner says, while a store server or a chunker is not."""
    from reindex.domain.config import config_from_dict
    from reindex.domain.identity import config_digest, legacy_config_digest

    def cfg(root: str, **extra: object):
        return config_from_dict({"index": "docs", "source": f"{root}/corpus", "state": {"uri": f"{root}/.reindex"},
                                 "store": {"path": f"{root}/qdrant"}, **extra})

    here, there = cfg("/a/ws"), cfg("/b/moved")
    assert config_digest(here) == config_digest(there)
    assert legacy_config_digest(here) != legacy_config_digest(there)  # what plans before issue 22 recorded
    assert config_digest(cfg("/a/ws", store={"url": "http://q:6333"})) != config_digest(here)
    assert config_digest(cfg("/a/ws", text={"chunker": {"kind": "fixed", "size": 99}})) != config_digest(here)
    assert config_digest(cfg("/a/ws", payload={"indexes": ["lang"]})) != config_digest(here)
