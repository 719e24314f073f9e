"""The ``reindex`` command line: parse options, make one ``api`` call, render the result.

Expected failures (ReindexError) print one line and exit 1; tracebacks only with ``--debug``."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from reindex.errors import ReindexError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


class _Group(click.Group):
    """Turns ReindexError into one line on stderr and exit 1 (unless --debug)."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ReindexError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


CONFIG_OPTION = click.option(
    "-c", "--config", "config_path", default="reindex.yaml", show_default=True, type=click.Path(dir_okay=False),
    help="Pipeline config file.",
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="reindex")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Plan, price and safely carry out reindexing of vector search indexes.

    \b
    Example:
      reindex init && reindex validate
    """
    ctx.ensure_object(dict)["debug"] = debug


@main.command()
@click.option("-c", "--config", "config_path", default="reindex.yaml", show_default=True, help="File to write.")
@click.option("--index", default="docs", show_default=True, help="Alias name readers query.")
@click.option("--source", default="./corpus", show_default=True, help="Corpus: folder, .jsonl, .parquet or s3://bucket/prefix.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
def init(config_path: str, index: str, source: str, force: bool) -> None:
    """Write a commented default reindex.yaml.

    \b
    Example:
      reindex init --index docs --source ./corpus
    """
    from reindex import api

    path = api.init_config(config_path, index=index, source=source, force=force)
    click.echo(f"wrote {path} (edit it, then run `reindex validate -c {path}`)")


@main.command()
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def validate(config_path: str, as_json: bool) -> None:
    """Validate a config and print its text id, vector id, pipeline id and collection name.

    \b
    Example:
      reindex validate -c reindex.yaml --json
    """
    from reindex import api

    v = api.validate_config(config_path)
    if as_json:
        _emit_json(v.as_dict())
        return
    click.echo(f"{config_path}: valid")
    rows = [
        ("index (alias)", v.identity.index),
        ("collection", v.identity.collection),
        ("chunker", v.chunker),
        ("text id", v.identity.text_id),
        ("vector id", v.identity.vector_id),
        ("pipeline id", v.identity.pipeline_id),
    ]
    for key, value in rows:
        click.echo(f"  {key:<14} {value}")
    for w in v.warnings:
        click.echo(f"  warning: {w}")


@main.command()
@click.argument("path")
@click.option("-c", "--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="Pipeline config (default: built-in defaults).")
@click.option("--chunker", "chunker", default=None, metavar="SPEC",
              help="Override the chunker: KIND[:key=value,…], e.g. recursive:size=400.")
@click.option("--summary", is_flag=True, help="Print a chunk-length summary instead of the chunks.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def chunk(path: str, config_path: str | None, chunker: str | None, summary: bool, as_json: bool) -> None:
    """Chunk a file (or a whole source with --summary) and print chunks with their fingerprints.

    PATH is a text file (.txt .md .rst .html) or a source: a folder, .jsonl, .parquet or s3://bucket/prefix.

    \b
    Examples:
      reindex chunk docs/guide.md --chunker sliding:size=256,overlap=0.2 --json
      reindex chunk ./corpus --summary --chunker cdc:min=176,max=352,cap=512
    """
    from reindex import api

    if summary:
        s = api.summarize_chunks(path, config_path=config_path, chunker=chunker)
        if as_json:
            _emit_json(s.as_dict())
            return
        click.echo(_render_summary(s))
        return
    records, report, _cfg = api.chunk_path(path, config_path=config_path, chunker=chunker)
    if as_json:
        _emit_json([r.as_dict() for r in records])
    else:
        for r in records:
            preview = r.text.strip().replace("\n", " ")
            preview = preview[:70] + ("…" if len(preview) > 70 else "")
            click.echo(f"{r.ordinal:>4}  {r.start:>7}-{r.end:<7} {r.tokens:>4} tok  {r.fingerprint[:12]}  {preview}")
    for bad in report.bad:
        click.echo(f"skipped {bad.doc_id}: {bad.reason}", err=True)


def _render_summary(s: Any) -> str:
    lines = [
        f"{s.chunker}",
        f"  documents {s.documents:,}   chunks {s.chunks:,}   tokens {s.tokens:,}",
        f"  chunk tokens: p10 {s.p10_tokens:.0f} · median {s.median_tokens:.0f} · p90 {s.p90_tokens:.0f} · max {s.max_tokens}",
    ]
    if s.over_model_limit:
        lines.append(f"  {s.over_model_limit:,} chunks exceed the model's input limit and would be truncated")
    if s.bad_documents:
        reasons = ", ".join(f"{k}: {v}" for k, v in s.bad_reasons.items())
        lines.append(f"  bad documents: {s.bad_documents} ({reasons})")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
