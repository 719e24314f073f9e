"""Config loading: clear one-line errors naming the file and field path; a commented default."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from reindex.api import init_config
from reindex.domain.config import (
    CHUNKER_KINDS,
    PipelineConfig,
    chunker_spec,
    config_from_dict,
    default_config_yaml,
    field_half,
    load_config,
    parse_chunker_spec,
)
from reindex.errors import ChunkerError, ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "reindex.yaml"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("index: docs\nsource: ./c\ntext: {chunker: {kind: recursive, size: -3}}\n",
         "reindex.yaml: text.chunker.size: Input should be greater than 0"),
        ("index: docs\nsource: ./c\ntext: {chunker: {kind: fancy}}\n",
         "reindex.yaml: text.chunker: unknown kind 'fancy'; allowed: anchored, callable, cdc, fixed, fixed_chars, langchain, markdown, paragraph, recursive, sentence, sliding"),
        ("index: docs\nsource: ./c\nvector: {distanse: cosine}\n", "reindex.yaml: vector.distanse: unknown field"),
        ("index: docs\nsource: ./c\nvector: {distance: manhattan}\n",
         "reindex.yaml: vector.distance: got 'manhattan'; input should be 'cosine', 'dot' or 'euclid'"),
        ("source: ./c\n", "reindex.yaml: index: required field is missing"),
        ("index: my__docs\nsource: ./c\n", "reindex.yaml: index: Value error, must be 1-63 letters"),
        ("index: docs\nsource: ./c\ntext: {chunker: {kind: cdc, min: 400, max: 300}}\n",
         "reindex.yaml: text.chunker: Value error, need min <= max <= cap (got 400/300/512)"),
        ("- just\n- a list\n", "reindex.yaml: expected a mapping at the top level, got list"),
        ("index: docs\nsource: [unclosed\n", "reindex.yaml:3:1: invalid YAML"),
        # Issue 22: footguns that were accepted silently.
        ("index: docs\nsource: ./c\nindex: other\n",
         "reindex.yaml:3:1: invalid YAML: duplicate key 'index' (first at line 1); keep one of them"),
        ("index: docs\nsource: ./c\napply:\n  shards: 4\n  shards: 8\n",
         "reindex.yaml:5:3: invalid YAML: duplicate key 'shards' (first at line 4); keep one of them"),
        ("index: docs\nsource: ./c\nstate: {uri: ''}\n",
         "reindex.yaml: state.uri: Value error, must not be empty (a folder, or s3://bucket/prefix; leave state out for .reindex)"),
        ("index: docs\nsource: ''\n", "reindex.yaml: source.uri: Value error, must not be empty"),
        ("index: docs\nsource: ./c\napply: {shards: true}\n", "reindex.yaml: apply.shards: got true; expected a whole number"),
        ("index: docs\nsource: ./c\napply: {embed_batch_size: 8.5}\n",
         "reindex.yaml: apply.embed_batch_size: got 8.5; expected a whole number"),
        ("index: docs\nsource: ./c\nembed: {base_url: 'http://user:pa55word@api.example/v1'}\n",
         "reindex.yaml: embed.base_url: Value error, the URL holds credentials (user:password@…); remove them and put "
         "the key in the environment variable that embed.api_key_env names"),
        ("index: docs\nsource: ./c\nstore: {url: 'https://admin:pa55word@qdrant.example:6333'}\n",
         "reindex.yaml: store.url: Value error, the URL holds credentials (user:password@…); remove them and put "
         "the key in the environment variable that store.api_key_env names"),
        ("index: docs\nsource: ./c\nstate: {uri: 's3://b/p', endpoint_url: 'http://AKIA:pa55word@minio:9000'}\n",
         "reindex.yaml: state.endpoint_url: Value error, the URL holds credentials (user:password@…); remove them "
         "and put them in the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)"),
    ],
)
def test_config_errors_are_one_clear_line(tmp_path: Path, body: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, body))
    text = str(info.value)
    assert "\n" not in text and "pa55word" not in text
    assert text.replace(str(tmp_path) + "/", "").startswith(message), text


def test_yaml_merge_keys_and_equal_keys_in_different_mappings_are_not_duplicates(tmp_path: Path) -> None:
    from reindex.domain.config import _UniqueKeyLoader, config_from_yaml

    # A merge key (<<) overridden by an explicit key is YAML's own idiom, not a duplicate.
    assert yaml.load("a: &x {k: 1, j: 2}\nb: {<<: *x, k: 3}\n", Loader=_UniqueKeyLoader) == \
        {"a": {"k": 1, "j": 2}, "b": {"k": 3, "j": 2}}
    cfg = load_config(write(tmp_path, "index: docs\nsource: ./c\ntext: {chunker: {kind: fixed, size: 120}}\n"
                                      "cutover: {k: 5}\napply: {shards: 3}\n"))
    assert (cfg.apply.shards, cfg.cutover.k, cfg.text.chunker.size) == (3, 5, 120)  # "size"/"k" in other mappings
    with pytest.raises(ConfigError, match=r"^x.yaml:3:1: invalid YAML: duplicate key 'source' \(first at line 2\)"):
        config_from_yaml("index: docs\nsource: ./c\nsource: ./d\n", "x.yaml")


def test_missing_config_file_says_how_to_create_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"config file not found \(create one with `reindex init`\)"):
        load_config(tmp_path / "nope.yaml")


def test_relative_paths_resolve_against_the_config_folder(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "index: docs\nsource: ./corpus\nstate: {uri: .state}\n"))
    assert cfg.source.uri == str(tmp_path / "corpus")
    assert cfg.state.uri == str(tmp_path / ".state")
    cfg = load_config(write(tmp_path, "index: docs\nsource: s3://bucket/prefix\n"))
    assert cfg.source.uri == "s3://bucket/prefix"


def test_default_config_is_valid_commented_and_tags_every_field(tmp_path: Path) -> None:
    path = init_config(tmp_path / "reindex.yaml", index="kb", source="./docs")
    text = path.read_text()
    cfg = load_config(path)
    assert cfg.index == "kb" and cfg.text.chunker.kind == "recursive"
    # Every key line is preceded by a comment naming its half.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and not stripped.startswith("version"):
            assert lines[i - 1].strip().startswith(("# [text]", "# [vector]", "# [operational]", "# kinds:")), line
    assert "# [vector] Vector dimension." in text
    # The serving section with its defaults, readers' cost rules included (issue 42).
    serving = text[text.index("\nserving:\n"):].split("\n", 2)[2].split("\nsync:", 1)[0]
    assert "  max_ms: auto" in serving and "  max_embedded_per_query: null" in serving and "  mode: auto" in serving
    assert cfg.serving.max_ms == "auto" and cfg.serving.max_embedded_per_query is None
    with pytest.raises(ConfigError, match="already exists; pass --force"):
        init_config(path)


def test_every_model_declares_its_half() -> None:
    assert field_half(PipelineConfig.model_fields["text"].annotation) == "text"
    assert field_half(PipelineConfig.model_fields["vector"].annotation) == "vector"
    for name in ("source", "store", "state", "cost", "approval", "apply", "embed", "cutover", "sync", "serving"):
        assert field_half(PipelineConfig.model_fields[name].annotation) == "operational"
    for model in CHUNKER_KINDS.values():
        assert field_half(model) == "text"
        for fname, field in model.model_fields.items():
            assert fname == "kind" or field.description, f"{model.__name__}.{fname} has no description"


@pytest.mark.parametrize(
    ("spec", "canonical"),
    [
        ("recursive:size=400", "recursive:size=400"),
        ("sliding:size=256,overlap=0.2", "sliding:size=256,overlap=0.2"),
        ("cdc:min=176,max=352,cap=512", "cdc:min=176,max=352,cap=512,window=8"),
        ("fixed", "fixed:size=304"),
        (" sentence : sentences=3 , overlap=1 ", "sentence:sentences=3,overlap=1,size=512"),
    ],
)
def test_chunker_specs_round_trip(spec: str, canonical: str) -> None:
    cfg = parse_chunker_spec(spec)
    assert chunker_spec(cfg) == canonical
    assert parse_chunker_spec(canonical) == cfg


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("wavelet:size=3", "unknown chunker kind 'wavelet'"),
        ("recursive:size", "expected key=value, got 'size'"),
        ("recursive:size=big", "size: Input should be a valid integer"),
        ("sliding:size=256,overlap=1.5", "overlap: Input should be less than 1"),
        ("recursive:colour=red", "colour: unknown field"),
    ],
)
def test_bad_chunker_specs(spec: str, message: str) -> None:
    with pytest.raises(ChunkerError, match=message):
        parse_chunker_spec(spec)


def test_source_accepts_a_plain_string_or_a_mapping() -> None:
    a = config_from_dict({"index": "d", "source": "x.parquet"})
    b = config_from_dict({"index": "d", "source": {"uri": "x.parquet", "text_field": "body"}})
    assert a.source.uri == b.source.uri == "x.parquet" and b.source.text_field == "body"


def test_default_yaml_parses_to_defaults() -> None:
    data = yaml.safe_load(default_config_yaml())
    cfg = config_from_dict(data)
    assert cfg == PipelineConfig(index="docs", source="./corpus")
