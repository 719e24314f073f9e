"""The ``reindex`` command line: parse options, make one ``api`` call, render the result.

Expected failures (ReindexError) print one line and exit 1; tracebacks only with ``--debug``.
The terminal text of each result is rendered by :mod:`reindex.reports` (plain strings, no click);
this module holds only the click commands, their options and help (apply's progress bar: reindex.terminal.progress).
Lines: over the ~600-line guide on purpose, with one role: every command's options and help (each with an
example). What a command prints lives in ``reindex.reports`` and what it does in ``reindex.api``."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from reindex import api, reports  # both faces import what a name needs on first use
from reindex.errors import ReindexError
from reindex.foundation.exiting import exit_now, status_of
from reindex.foundation.orphans import stop_orphans
from reindex.terminal.progress import ApplyProgress
from reindex.foundation.settings import apply_offline_defaults, temporary_server_failure

__all__ = ["main", "run"]

apply_offline_defaults()


# Usage errors get EX_USAGE (sysexits.h) rather than click's 2, which `plan` and `classify` use for
# "changes planned" / "text-affecting". All exit codes are listed in `reindex --help` and the README.
EXIT_USAGE = 64


def _usage(err: click.UsageError) -> click.UsageError:
    err.exit_code = EXIT_USAGE
    return err


class _Group(click.Group):
    """Turns ReindexError into one line on stderr and exit 1 (unless --debug); any other failure too, named
    as unexpected, so that no traceback reaches the user without --debug. Usage errors exit 64."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as err:  # the group's own options (`reindex --bogus`)
            raise _usage(err) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as err:  # an unknown command, or a command's unknown option / bad argument
            raise _usage(err) from None
        except ReindexError as err:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"error: {err}", err=True)
            ctx.exit(err.exit_code)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except OSError as err:  # a full disk, a vanished folder: say which file and why
            if ctx.obj and ctx.obj.get("debug"):
                raise
            where = f" ({err.filename})" if getattr(err, "filename", None) else ""
            click.echo(f"error: {err.strerror or err}{where}; fix that and run the command again", err=True)
            ctx.exit(1)
        except Exception as err:  # noqa: BLE001 - the last line of defence against tracebacks
            if ctx.obj and ctx.obj.get("debug"):
                raise
            if (line := temporary_server_failure(err)) is not None:  # serve, deploy: Prefect's own start-up
                click.echo(f"error: {line}", err=True)
                ctx.exit(1)
            first = (str(err).splitlines() or [""])[0]
            click.echo(f"error: unexpected {type(err).__name__}: {first} (run with --debug for the traceback "
                       "and report it)", err=True)
            ctx.exit(1)


def _emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


CONFIG_OPTION = click.option(
    "-c", "--config", "config_path", default="reindex.yaml", show_default=True, type=click.Path(dir_okay=False),
    help="Pipeline config file.",
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="vector-reindex")  # the distribution's name (`reindex` on PyPI is another project)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Plan, price and safely carry out reindexing of vector search indexes.

    Exit codes: 0 success (plan: nothing to do), 1 error, 2 plan: changes planned (classify:
    text-affecting), 3 cutover: gate failed (classify: structural), 64 usage error (unknown option, bad
    argument). Every command takes --json: one JSON document on stdout (errors: one line on stderr).

    \b
    Example:
      reindex init && reindex validate
    """
    ctx.ensure_object(dict)["debug"] = debug

    for pid in stop_orphans():  # e.g. Prefect's temporary server left by a killed `reindex apply --prefect`
        click.echo(f"stopped process {pid}, left behind by a reindex command that was killed", err=True)


def run() -> None:
    """The ``reindex`` command: :func:`main`, then the process ends with its status through
    :func:`reindex.foundation.exiting.exit_now` (no native teardown after a finished command)."""
    try:
        main()
    except SystemExit as done:
        exit_now(status_of(done.code))
    exit_now(0)


@main.command()
@click.option("-c", "--config", "config_path", default="reindex.yaml", show_default=True, help="File to write.")
@click.option("--index", default="docs", show_default=True, help="Alias name readers query.")
@click.option("--source", default="./corpus", show_default=True, help="Corpus: folder, .jsonl, .parquet or s3://bucket/prefix.")
@click.option("--force", is_flag=True, help="Overwrite an existing file.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"config\": PATH}.")
def init(config_path: str, index: str, source: str, force: bool, as_json: bool) -> None:
    """Write a commented default reindex.yaml.

    \b
    Example:
      reindex init --index docs --source ./corpus
    """

    path = api.init_config(config_path, index=index, source=source, force=force)
    if as_json:
        _emit_json({"config": str(path), "index": index, "source": source})
        return
    click.echo(f"wrote {path} (edit it, then run `reindex validate -c {path}`)")


@main.command()
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
def validate(config_path: str, as_json: bool) -> None:
    """Validate a config and print its text id, vector id, pipeline id and collection name.

    Also checks that the source exists and its first document can be read (folder or file present,
    JSONL/Parquet that opens, S3 prefix with at least one object), that a chunker named by import path
    (kind: langchain or callable) imports and builds, and that vector.dimension is what the model produces
    (read from the model's config, nothing encoded). One line per problem on stderr, exit 1.

    \b
    Example:
      reindex validate -c reindex.yaml --json
    """

    v = api.validate_config(config_path)
    if as_json:
        _emit_json(v.as_dict())
    else:
        click.echo(reports.validation_text(config_path, v))
    for problem in v.problems:
        click.echo(f"error: {problem}", err=True)
    if v.problems:
        raise click.exceptions.Exit(1)


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

    if summary:
        s = api.summarize_chunks(path, config_path=config_path, chunker=chunker)
        if as_json:
            _emit_json(s.as_dict())
            return
        click.echo(reports.chunk_summary_text(s))
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


@main.command()
@CONFIG_OPTION
@click.option("--baseline-config", type=click.Path(dir_okay=False), default=None,
              help="Old config to compare against (instead of the live population).")
@click.option("--baseline-corpus", default=None, help="Old corpus (default: the baseline config's source).")
@click.option("--out", default="plans", show_default=True, help="Folder for the plan and its reports.")
@click.option("--sample", type=int, default=None, help="Project from a length-stratified sample of N documents.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the sample.")
@click.option("--verify", is_flag=True, help="Read the whole source and compare content hashes, even where its "
              "cursor (listing metadata, a cursor column, a change log's offset) would find the changes.")
@click.option("--forecast", type=int, is_flag=False, flag_value=0, default=None, metavar="[N]",
              help="What a pipeline-scoped change buys, before paying: build both sides on N sampled documents "
                   "plus those the queries point at (no N: 10 % of the corpus, at least 30 documents, those "
                   "included), in a scratch store, and evaluate them as the cutover will (verdict, metrics with "
                   "intervals, what the gate can tell, its own CPU: projected first, then measured).")
@click.option("--queries", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --forecast: the labelled queries file the cutover will use (as `reindex cutover --queries`); "
                   "default: the cutover's probes.")
@click.option("--json", "as_json", is_flag=True, help="Print the key numbers as JSON.")
@click.pass_context
def plan(ctx: click.Context, config_path: str, baseline_config: str | None, baseline_corpus: str | None, out: str,
         sample: int | None, seed: int, verify: bool, forecast: int | None, queries: str | None,
         as_json: bool) -> None:
    """Classify and price a change; write plans/<date>-<index>-<kind>-<hash>.json with Markdown and HTML reports.

    Exit codes: 0 nothing to do, 2 changes planned, 1 error (like terraform plan -detailed-exitcode), 64 usage
    error.

    \b
    Examples:
      reindex plan -c reindex.yaml
      reindex plan -c new.yaml --baseline-config old.yaml --baseline-corpus old.parquet --json
      reindex plan --forecast 100 --queries queries.jsonl
    """

    with api.Index.open(config_path) as ix:
        if queries is not None and forecast is None:
            raise click.UsageError("--queries goes with --forecast (the cutover takes its own --queries)")
        p, path = ix.plan(baseline_config=baseline_config, baseline_corpus=baseline_corpus, out=out, sample=sample,
                          seed=seed, verify=verify, forecast=forecast, queries=queries,
                          say=lambda line: click.echo(line, err=True))
    if as_json:
        _emit_json({**p.summary(), "plan_file": str(path)})
    else:
        click.echo(reports.plan_text(p, path))
    ctx.exit(2 if p.kind.does_work else 0)


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the whole plan.")
def show(plan_file: str, as_json: bool) -> None:
    """Verify a plan file's hash and print its summary.

    \b
    Example:
      reindex show plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json
    """

    p = api.show_plan(plan_file)
    if as_json:
        _emit_json(dict(p.body))
    else:
        click.echo(reports.plan_text(p, plan_file))


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@click.option("--by", required=True, help="Who approves (or rejects).")
@click.option("--note", default="", help="Why (the reason, with --reject).")
@click.option("--reject", is_flag=True, help="Reject the plan instead: final for this plan, revokes any approval of it.")
@click.option("-c", "--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="Check the plan is for this config's index.")
@click.option("--json", "as_json", is_flag=True, help="Print the decision as JSON.")
def approve(plan_file: str, by: str, note: str, reject: bool, config_path: str | None, as_json: bool) -> None:
    """Approve a plan; resumes a paused run waiting for that plan.

    Records an approval bound to the plan's hash (a changed plan invalidates it), then resumes every
    Prefect run of reindex-reindex / reindex-sync paused waiting for that plan, and says which: the run
    applies, cuts over and schedules gc. With --reject, records a rejection (final for this plan; it
    revokes an approval given anywhere) and resumes the paused run with it: nothing changes.

    \b
    Example:
      reindex approve plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --by alice --note "ok for Q4"
      reindex approve plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --by bob --reject --note "too big"
    """

    d = (api.reject_and_resume if reject else api.approve_and_resume)(plan_file, by, note, config_path)
    if as_json:
        _emit_json(d.as_dict())
        return
    click.echo(reports.decision_text(d))


@main.command()
@click.option("--index", default=None, help="Only runs of this index.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def runs(index: str | None, as_json: bool) -> None:
    """List Prefect runs paused waiting for approval: plan, peak footprint and deadline (needs
    PREFECT_API_URL).

    \b
    Example:
      reindex runs --index docs
    """

    waiting = api.waiting_runs(index)
    if as_json:
        _emit_json([r.as_dict() for r in waiting])
        return
    click.echo(reports.waiting_runs_text(waiting))


@main.command()
@click.option("--histogram", required=True, type=click.Path(dir_okay=False, exists=True),
              help="CSV with header documents,tokens (one row per length bucket).")
@click.option("--from", "old", required=True, metavar="SPEC", help="Current chunker, e.g. sliding:size=512,overlap=0.1.")
@click.option("--to", "new", required=True, metavar="SPEC", help="Proposed chunker, e.g. sliding:size=256,overlap=0.2.")
@click.option("--usd-per-mtok", type=float, default=0.02, show_default=True, help="Price per million tokens.")
@click.option("--tokens-per-minute", type=float, default=3.5e6, show_default=True, help="Embedding throughput.")
@click.option("--dimension", type=int, default=384, show_default=True, help="Vector dimension (for bytes).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def estimate(histogram: str, old: str, new: str, usd_per_mtok: float, tokens_per_minute: float, dimension: int,
             as_json: bool) -> None:
    """Estimate a chunker change over a length histogram of a corpus nobody has chunked yet.

    \b
    Example:
      reindex estimate --histogram buckets.csv --from sliding:size=512,overlap=0.1 --to sliding:size=256,overlap=0.2
    """

    e = api.estimate(histogram, old, new, usd_per_mtok=usd_per_mtok, tokens_per_minute=tokens_per_minute,
                     dimension=dimension)
    if as_json:
        _emit_json(reports.estimate_json(e))
        return
    click.echo(reports.estimate_text(e, old, new, usd_per_mtok, tokens_per_minute))


@main.command()
@click.option("--fixture", required=True, help="A small corpus spanning the length buckets.")
@click.option("--base", required=True, type=click.Path(dir_okay=False, exists=True), help="Config before the change.")
@click.option("--head", required=True, type=click.Path(dir_okay=False, exists=True), help="Config after the change.")
@click.option("--scale-to", type=int, default=None, help="Project to a corpus of N documents (linear).")
@click.option("--histogram", type=click.Path(dir_okay=False, exists=True), default=None,
              help="Project with a length histogram (window chunkers).")
@click.option("--format", "fmt", type=click.Choice(["md", "json"]), default="md", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON (the same as --format json).")
@click.pass_context
def classify(ctx: click.Context, fixture: str, base: str, head: str, scale_to: int | None, histogram: str | None,
             fmt: str, as_json: bool) -> None:
    """CI mode: classify a config change on a fixture (safe / text-affecting / structural).

    Exit codes: 0 safe, 2 text-affecting, 3 structural, 1 error, 64 usage error.

    \b
    Example:
      reindex classify --fixture tests/fixture --base main.yaml --head pr.yaml --scale-to 8000000 --format md
    """

    r = api.classify_change(fixture, base, head, scale_to=scale_to, histogram=histogram)
    if fmt == "json" or as_json:
        _emit_json(r.as_dict())
    else:
        click.echo(reports.classification_text(r))
    ctx.exit(r.exit_code)


@main.command()
@CONFIG_OPTION
@click.option("--chunks", type=int, default=256, show_default=True, help="Chunks to time.")
@click.option("--backend", "backend_specs", multiple=True, metavar="BACKEND[:PRECISION]",
              help="Also time this backend of the same model (torch, onnx, onnx:int8, torch:float16); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def calibrate(config_path: str, chunks: int, backend_specs: tuple[str, ...], as_json: bool) -> None:
    """Time the configured embedder on real chunks of the corpus; plans then use the measured rate.

    Timed in CPU-seconds (what the model costs, whatever the load) and wall seconds. Precedence of the rate a
    plan uses: cost.tokens_per_minute in the config, then the rate the last apply of the same model measured,
    then this calibration, then (a local model) 32 chunks timed by the plan, else 150,000 tokens/min. Local backends
    are compared with float32 torch on the same chunks (mean cosine, top-10 overlap on probe queries), and each
    embedder with the library call it stands on (--json: embed_vs_raw, CPU of reindex's embed ÷ the library's).

    \b
    Example:
      reindex calibrate -c reindex.yaml --chunks 256 --backend onnx --backend onnx:int8
    """

    with api.Index.open(config_path) as ix:
        r = ix.calibrate(chunks=chunks, backends_to_measure=backend_specs)
    if as_json:
        _emit_json(r)
        return
    for b in r["backends"]:
        where = f" ({b['backend']}/{b['precision']} on {b['device']})" if b.get("device") else ""
        agree = (f"; cosine to float32 {b['cosine_to_float32']:.4f}, top-10 overlap {b['recall_at_10_overlap']:.2f}"
                 if "recall_at_10_overlap" in b else "")
        per_cpu = f"{b['tokens_per_cpu_second']:,.0f} tokens per CPU-second, " if b.get("tokens_per_cpu_second") else ""
        raw = f"; {b['embed_vs_raw']:.2f}× the library's own call" if b.get("embed_vs_raw") else ""
        click.echo(f"{b['model']}{where}: {per_cpu}{b['tokens_per_second']:,.0f} tokens/s of wall ({b['tokens_per_minute']:,.0f}"
                   f"/min) on {b['chunks']} chunks, {b['tokens']:,} tokens in {b['cpu_seconds']} CPU-s / {b['seconds']} s "
                   f"(load {b['load']} on {b['cpus']} CPUs){agree}{raw}; recorded for plans")


@main.command()
@click.argument("plan_file", type=click.Path(dir_okay=False))
@CONFIG_OPTION
@click.option("--replan", is_flag=True, help="If the plan's inputs drifted, plan again and apply the new plan.")
@click.option("--prefect/--no-prefect", "prefect", default=None,
              help="Run the shards as the Prefect flow `reindex-apply` (default: only when a Prefect API is "
                   "configured by PREFECT_API_URL or the active Prefect profile), or force the in-process runner.")
@click.option("--task-runner", default=None, metavar="SPEC",
              help="Where the shards run: threads[:N] (default, in this process), dask (a local cluster of threads), "
                   "dask-processes[:N] (N local worker processes), dask:tcp://HOST:PORT (a running Dask cluster; "
                   "through Prefect's task runner when Prefect is in use, else dask.distributed directly) or "
                   "prefect-pool:POOL[:N] (flow runs of the reindex-shard/POOL deployment on a Prefect work pool: one "
                   "per shard, or N; see `reindex deploy-shards`).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--json", "as_json", is_flag=True, help="Print the run report as JSON.")
def apply(plan_file: str, config_path: str, replan: bool, prefect: bool | None, task_runner: str | None,
          no_progress: bool, as_json: bool) -> None:
    """Carry out a plan: a shadow population built in resumable shards with exact vector reuse, or
    documents synced in place.

    Refuses unapproved plans and plans whose inputs drifted; one apply per index at a time. Runs
    in-process unless a Prefect API is configured (then as the Prefect flow `reindex-apply`); with
    --task-runner the shards run in Dask worker processes or on a Prefect work pool, here or on
    other machines.

    \b
    Example:
      reindex apply plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json -c reindex.yaml
      reindex apply plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --task-runner dask-processes:2
      reindex apply plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --task-runner prefect-pool:reindex
    """
    from reindex.runners import parse_task_runner

    parse_task_runner(task_runner)  # a bad spec fails before any work
    with ApplyProgress(enabled=not no_progress and not as_json, announce=not as_json) as bar, \
            api.Index.open(config_path) as ix:
        r = ix.apply(plan_file, replan=replan, progress=bar, prefect=prefect, task_runner=task_runner)
    if as_json:
        _emit_json(r.as_dict())
    else:
        click.echo(reports.apply_text(r))
    if r.status == "failed":
        raise click.exceptions.Exit(1)


@main.command()
@CONFIG_OPTION
@click.option("--plans", "plans_dir", default="plans", show_default=True, help="Folder for plans and their reports.")
@click.option("--queries", type=click.Path(dir_okay=False, exists=True), default=None,
              help="JSONL queries for the cutover's comparison (default: cutover.queries, else probes from the corpus).")
@click.option("--k", type=int, default=None, help="Comparison depth of the cutover (default: cutover.k).")
@click.option("--no-gc", is_flag=True, help="Do not delete retired populations past retention at the end.")
@click.option("--verify", is_flag=True, help="Read the whole source and compare content hashes instead of trusting its "
              "cursor (metadata can lie: new bytes, same size and mtime); repairs the cursor. See sync.verify_every.")
@click.option("--watch", is_flag=True, help="Live mode: hold the lock and the writer and sync each change as it "
              "arrives (read through the source's cursor), until SIGTERM or Ctrl-C; prints one line (or JSON document) "
              "per cycle that did something.")
@click.option("--interval", type=float, default=2.0, show_default=True, help="With --watch: seconds between looks "
              "at the source when nothing changed.")
@click.option("--json", "as_json", is_flag=True, help="Print the cycle's result as JSON.")
def sync(config_path: str, plans_dir: str, queries: str | None, k: int | None, no_gc: bool, verify: bool,
         watch: bool, interval: float, as_json: bool) -> None:
    """One unattended cycle, for cron: plan; apply a change the approval policy lets through (in place, or
    built and cut over through the gate); plan a change that needs approval and stop (after `reindex
    approve`, the next `reindex sync` carries it out); then gc past retention.

    Takes the index lock before planning: beside a running apply it reports "skipped" and exits 0.
    Exit codes: 0 applied, nothing to do, or skipped; 2 a plan waits for approval (its path is printed);
    3 the cutover gate failed (alias untouched); 1 error.

    A sync reads what changed, found from the source's cursor (a folder's sizes and mtimes, S3's ETags, a cursor
    column, a change log's offset); a JSON Lines file is read whole. --verify (or sync.verify_every) reads
    everything and compares content hashes.

    \b
    Example (crontab):
      0 * * * *  cd /srv/docs && reindex sync -c reindex.yaml
      0 3 * * 0  cd /srv/docs && reindex sync -c reindex.yaml --verify
    """

    policy = api.SyncPolicy(plans_dir=plans_dir, queries=queries, k=k, gc=not no_gc, verify=verify)
    if watch:
        _watch(config_path, policy, interval, as_json)
        return
    with api.Index.open(config_path) as ix:
        r = ix.sync(policy)
    if as_json:
        _emit_json(r.as_dict())
    else:
        click.echo(reports.sync_text(r))
    if r.exit_code:
        raise click.exceptions.Exit(r.exit_code)




def _watch(config_path: str, policy: Any, interval: float, as_json: bool) -> None:
    """`reindex sync --watch`: cycles until SIGTERM or SIGINT; a line per cycle that did something."""
    import signal
    import threading
    import time

    from reindex.usecases.watch import check_interval

    check_interval(interval)  # nan never elapses, inf never looks again: refused in one line, before any work
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    def said(r: Any) -> None:
        if r.outcome.value == "nothing-to-do" and not r.in_place and not r.replanned:
            return
        if as_json:
            click.echo(json.dumps(r.as_dict(), ensure_ascii=False, default=str), nl=True)
        else:
            click.echo(f"{time.strftime('%H:%M:%S')} {reports.sync_text(r)}")
        sys.stdout.flush()

    with api.Index.open(config_path) as ix:
        if not as_json:
            click.echo(f"watching {ix.name} (every {interval:g} s when nothing changes); SIGTERM or Ctrl-C stops")
        summary = ix.watch(policy, interval=interval, stop=stop, on_cycle=said)
    if not as_json:
        click.echo(f"stopped after {summary.ticks} cycles ({summary.applied} changed the index)")


@main.command()
@click.argument("plan_file", required=False, type=click.Path(dir_okay=False))
@CONFIG_OPTION
@click.option("--queries", type=click.Path(dir_okay=False, exists=True), default=None,
              help="JSONL queries (query, optional doc_path/relevant and evidence); default: cutover.queries, else probes from the corpus.")
@click.option("--k", type=int, default=None, help="Comparison depth (default: cutover.k).")
@click.option("--force", is_flag=True, help="Swap even if the gate fails (needs an approval record; logged).")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def cutover(plan_file: str | None, config_path: str, queries: str | None, k: int | None, force: bool, as_json: bool) -> None:
    """Compare old and new on the same queries, gate, and move the alias atomically.

    Exit codes: 0 swapped, 3 the gate failed (alias untouched), 1 error, 64 usage error.

    \b
    Example:
      reindex cutover plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --queries queries.jsonl
    """

    with api.Index.open(config_path) as ix:
        r = ix.cutover(plan_file, queries=queries, k=k, force=force)
    if r.report.get("already"):
        if as_json:
            _emit_json(r.as_dict())
        else:

            line = reports.recovered_text(r.report.get("recovered"))
            if line:
                click.echo(line)
            click.echo(f"already cut over: alias {r.report['index']} serves {r.report['shadow']}; nothing to do")
        return
    if as_json:
        _emit_json(r.as_dict())
    else:
        click.echo(reports.cutover_text(r))
    if not r.report["swap"]:
        raise click.exceptions.Exit(3)



@main.command()
@CONFIG_OPTION
@click.option("--to", "to", default=None, help="Collection to roll back to (default: the previous target).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def rollback(config_path: str, to: str | None, as_json: bool) -> None:
    """Swap the alias back to the previous population in one atomic call.

    The target must verify first: a complete population whose point count matches its chunk manifest.

    \b
    Example:
      reindex rollback -c reindex.yaml
    """

    with api.Index.open(config_path) as ix:
        r = ix.rollback(to=to)
    if as_json:
        _emit_json(r)
        return
    click.echo(f"alias {r['index']}: {r['from']} → {r['to']} (rolled back)")


@main.command()
@CONFIG_OPTION
@click.option("--older-than", default=None, help="Retention, e.g. 7d, 12h (default: cutover.retention_days).")
@click.option("--dry-run", is_flag=True, help="List what would be deleted (reads only: works while an apply runs).")
@click.option("--force", is_flag=True, help="Also delete populations live within the rollback window (cutover.retention_days).")
@click.option("--yes", "-y", is_flag=True, help="Delete without asking (for scripts; without a terminal nothing is deleted otherwise).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.argument("collections", nargs=-1)
def gc(config_path: str, older_than: str | None, dry_run: bool, force: bool, yes: bool, as_json: bool,
       collections: tuple[str, ...]) -> None:
    """Delete retired populations past retention (or the named ones) and their state; never a live one.

    Asks before deleting (on a terminal); `--yes` for scripts. A population live within
    cutover.retention_days is kept unless `--force`, whatever `--older-than` says.

    \b
    Examples:
      reindex gc --older-than 7d --dry-run
      reindex gc docs__1a2b3c4d5e6f --yes
    """
    import sys


    def confirm(doomed: list[dict]) -> bool:
        if yes:
            return True
        if not sys.stdin.isatty():
            click.echo(f"gc: {len(doomed)} population(s) to delete and no terminal to ask; pass --yes to delete",
                       err=True)
            return False
        for d in doomed:
            click.echo(f"  {d['collection']} ({d['state']}, {d['age_days']} days)", err=True)
        return click.confirm(f"delete {len(doomed)} population(s) and their state?", err=True)

    with api.Index.open(config_path) as ix:
        actions = ix.gc(older_than=older_than, dry_run=dry_run, names=list(collections) or None, force=force,
                        confirm=confirm)
    if as_json:
        _emit_json({"actions": actions})
    else:
        if not actions:
            click.echo("nothing to delete")
        for a in actions:
            why = f"; {a['protected']}" if a["protected"] else ""
            click.echo(f"{a['action']} {a['collection']} ({a['state']}, {a['age_days']} days{why})")
    if any(a["action"] == "not confirmed" for a in actions):
        raise click.exceptions.Exit(1)


@main.command()
@click.argument("text")
@CONFIG_OPTION
@click.option("--k", type=int, default=10, show_default=True, help="How many chunks.")
@click.option("--filter", "filters", multiple=True, metavar="KEY=VALUE", help="Only chunks whose doc_id or metadata field (source.metadata_fields) equals VALUE; repeatable (all must hold).")
@click.option("--collection", default=None, help="A population by name instead of the live alias.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"population\", \"vector_id\", \"model\", \"mode\", \"note\", \"results\": [{doc_id, score, page_content, metadata}]}.")
def query(text: str, config_path: str, k: int, filters: tuple[str, ...], collection: str | None, as_json: bool) -> None:
    """Search the live alias as a reader would (works while apply or cutover runs).

    \b
    Example:
      reindex query "how are imports resolved" -c reindex.yaml --k 5 --json
    """

    with api.Index.open(config_path) as ix:
        r = ix.query(text, k=k, filters=api.parse_filters(filters), collection=collection)
    if as_json:
        _emit_json({"population": r.population, "vector_id": r.vector_id, "model": r.model, "mode": r.mode,
                    "serving": r.serving, "note": r.note, "results": list(r.results)})
        return
    m = r.model
    click.echo(f"{r.population} ({m.get('provider')} {m.get('model')}, {m.get('backend')}/{m.get('precision')}, "
               f"{m.get('dimension')} dims; serving mode {r.mode})")
    if r.note:
        click.echo(f"note: {r.note}")
    for n, hit in enumerate(r.results, 1):
        snippet = " ".join(hit["page_content"].split())[:100]
        click.echo(f"{n:2d}. {hit['score']:.3f}  {hit['doc_id']}#{hit['ordinal']}  {snippet}")
    if not r.results:
        click.echo(f"no results from {r.target}")


@main.command()
@CONFIG_OPTION
@click.option("--evaluate", is_flag=True, help="Evaluate the modes again on the cutover's queries and gate them first.")
@click.option("--queries", type=click.Path(dir_okay=False, exists=True), default=None,
              help="With --evaluate: a labelled queries file (as `reindex cutover --queries`); default: "
                   "serving.queries, else the cutover's probes.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: mode, since, live, shadow, stale, reason, evidence.")
def serving(config_path: str, evaluate: bool, queries: str | None, as_json: bool) -> None:
    """Show what readers are served while a model change builds: old, bridge (new-model queries mapped into the
    live space) or cascade (live recall, new-model rerank), with each mode's gate. Reads only, beside an apply.

    \b
    Example:
      reindex serving -c reindex.yaml --evaluate --queries queries.jsonl
    """
    if queries is not None and not evaluate:
        raise click.UsageError("--queries goes with --evaluate")
    with api.Index.open(config_path) as ix:
        r = ix.serving(evaluate=evaluate, queries=queries)
    if as_json:
        _emit_json(r.as_dict())
        return
    click.echo(reports.serving_text(r.as_dict()))


@main.command()
@CONFIG_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def status(config_path: str, as_json: bool) -> None:
    """Show aliases, populations (live, shadow, retired with age; one being built with its shards done /
    total) and the lock holder (host, pid, since, lease). Reads only: works while an apply runs.

    \b
    Example:
      reindex status -c reindex.yaml
    """

    with api.Index.open(config_path) as ix:
        st = ix.status()
    if as_json:
        _emit_json(st)
        return
    click.echo(reports.status_text(st))


@main.command()
@CONFIG_OPTION
@click.option("--full", is_flag=True, help="Check every point instead of a sample (reads the whole collection, "
              "streaming); vectors are still re-embedded for --embed-sample points only.")
@click.option("--sample", type=int, default=256, show_default=True,
              help="Manifest rows and stored points looked at per population (also where --full draws the "
                   "re-embedded vectors from).")
@click.option("--embed-sample", type=int, default=32, show_default=True,
              help="Vectors re-embedded with the population's own model and compared with what is stored (0: none).")
@click.option("--repair", is_flag=True, help="Write the plan that fixes the live population's points (approve it "
              "per policy, carry it out with `reindex apply`); other findings get the command that fixes them.")
@click.option("--plans", "plans_dir", default="plans", show_default=True,
              help="Folder the repair plan is written to (and where half-done runs' plan files are looked for).")
@click.option("--json", "as_json", is_flag=True,
              help='Print JSON: {"healthy": bool, "findings": [{"kind", "population", "count", "examples", ...}], '
                   '"advice", "repair", ...}.')
def doctor(config_path: str, full: bool, sample: int, embed_sample: int, repair: bool, plans_dir: str,
           as_json: bool) -> None:
    """Check that the store holds what the books say: each population against its chunk manifest (counts,
    then a sample of points: ids, fingerprints, dimension, payload text hash, vectors re-embedded; every
    point with --full), points of another pipeline, the alias against the population records, half-done
    applies, orphaned collections, staged results left behind, a stale lock. Reads only.

    Exit 0 healthy, 1 drift found (or an error).

    \b
    Examples:
      reindex doctor -c reindex.yaml
      reindex doctor --full --repair && reindex apply plans/2026-11-29-docs-document-scoped-1a2b3c4d.json
    """

    with api.Index.open(config_path) as ix:
        r = ix.doctor(full=full, sample=sample, embed_sample=embed_sample, repair=repair, out=plans_dir)
    if as_json:
        _emit_json(r.as_dict())
    else:
        click.echo(reports.doctor_text(r))
    if not r.healthy:
        raise click.exceptions.Exit(1)


@main.command()
@click.option("--pairs", "pairs", default=None, type=click.Path(dir_okay=False),
              help="Revision pairs: .parquet or .jsonl with pair_id, lang, doc_path, old_text, new_text[, edit_fraction].")
@click.option("--from-git", "from_git", default=None, type=click.Path(file_okay=False), metavar="REPO",
              help="Build pairs from a git repository's history instead (needs --paths).")
@click.option("--paths", default=None, metavar="GLOB", help="Files of --from-git, a glob such as 'docs/**/*.md'.")
@click.option("--chunker", "chunkers", multiple=True, metavar="SPEC",
              help="A chunker to measure (repeat); default: fixed, recursive, cdc, paragraph, anchored.")
@click.option("-c", "--config", "config_path", default=None, type=click.Path(dir_okay=False),
              help="Pipeline config: its tokenizer counts tokens, its model embeds (default: built-in defaults).")
@click.option("--lang", default=None, metavar="LANG", help="Only pairs (and queries) of this language, e.g. en or zh.")
@click.option("--band", "bands", multiple=True, type=click.Choice(["<=5%", "5-20%", "20-50%", ">50%"]),
              help="Only pairs of this edit band (repeat).")
@click.option("--limit", type=int, default=None, help="Only the first N pairs (after the filters).")
@click.option("--calibrate", is_flag=True, help="Tune each chunker's size on held-out documents to --target-median first.")
@click.option("--target-median", type=float, default=250, show_default=True, help="Median chunk length in tokens for --calibrate.")
@click.option("--queries", default=None, type=click.Path(dir_okay=False), help="Queries (queries.jsonl format) for retrieval quality.")
@click.option("--corpus", "corpus", multiple=True, type=click.Path(dir_okay=False),
              help="Snapshot .parquet the queries refer to (repeat for several languages).")
@click.option("--pool", type=int, default=None, help="Retrieval pool: query documents plus seeded random others, N in all (default: every document).")
@click.option("--cache", default=".reindex/embed-cache", show_default=True, help="Embedding cache folder (by fingerprint).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the bootstrap and the pool sample.")
@click.option("--report", "report_dir", default=None, type=click.Path(file_okay=False), metavar="DIR",
              help="Write measure.json, measure.md and measure.html here.")
@click.option("--rechunk", type=click.Choice(["stateless", "sticky"]), default="stateless", show_default=True,
              help="sticky: re-chunk each new version against its old version's chunks (text.rechunk: sticky).")
@click.option("--chains", "chains", type=int, default=None, metavar="N",
              help="With --from-git and --rechunk sticky: follow the files with the most commits (--limit of them, "
                   "default 12) over their last N revisions, sticky vs stateless, instead of pairs.")
@click.option("--unit", "unit", default=None, metavar="UNIT",
              help="sentence[:min=N] or chunk: R_c at chunk level beside unit level (the sentences inside each chunk); "
                   "with --queries, composed-vs-whole-chunk vector quality per --model.")
@click.option("--model", "models", multiple=True, type=click.Choice(["static", "minilm"]),
              help="With --unit and --queries: the model(s) to compose with (repeat; default both).")
@click.option("--json", "as_json", is_flag=True, help="Print the whole report as JSON.")
def measure(pairs: str | None, from_git: str | None, paths: str | None, chunkers: tuple[str, ...], config_path: str | None,
            lang: str | None, bands: tuple[str, ...], limit: int | None, calibrate: bool, target_median: float,
            queries: str | None, corpus: tuple[str, ...], pool: int | None, cache: str, seed: int, report_dir: str | None,
            rechunk: str, chains: int | None, unit: str | None, models: tuple[str, ...], as_json: bool) -> None:
    """Measure the recompute fraction R_c of chunkers over real revision pairs (seed 000).

    An input is reused only if byte-identical to an input of the old version of the same document;
    R_c = tokens of distinct new inputs that miss / tokens of all distinct new inputs.

    \b
    Examples:
      reindex measure --pairs revisions.parquet --calibrate --report out/
      reindex measure --pairs revisions.parquet --chunker anchored --chunker recursive:size=300 --band '<=5%' --json
      reindex measure --from-git ../peps --paths 'peps/*.rst' --limit 50
      reindex measure --pairs revisions.parquet --lang en --queries queries.jsonl --corpus snapshot_new.parquet --pool 200
      reindex measure --from-git ../peps --paths 'peps/*.rst' --rechunk sticky --chains 20 --limit 11
      reindex measure --pairs revisions.parquet --chunker recursive:size=278 --unit sentence --band '<=5%' --json
    """

    def progress(line: str) -> None:
        if not as_json:
            click.echo(f"  {line}", err=True)

    if chains is not None:
        if from_git is None or rechunk != "sticky":
            raise click.UsageError("--chains needs --from-git REPO and --rechunk sticky")
        if pairs or bands or calibrate or queries or corpus or report_dir:
            raise click.UsageError("--chains measures revision chains: --pairs, --band, --calibrate, --queries, --corpus and "
                                   "--report do not apply")
        result = api.measure_chains(from_git=from_git, paths=paths or "", chunkers=chunkers, config_path=config_path,
                                    lang=lang, revisions=chains, limit=limit or 12, seed=seed, progress=progress)
        if as_json:
            _emit_json(result)
        else:
            click.echo(reports.chains_text(result))
        return

    if unit is not None:
        if chains is not None or calibrate or rechunk != "stateless" or report_dir:
            raise click.UsageError("--unit measures pairs: --chains, --calibrate, --rechunk sticky and --report do not apply")
        result = api.measure_units(pairs=pairs, unit=unit, chunkers=chunkers, config_path=config_path, from_git=from_git,
                                   paths=paths, lang=lang, bands=bands, limit=limit, queries=queries, corpus=corpus,
                                   models=models or ("static", "minilm"), cache=cache, pool=pool, seed=seed,
                                   progress=progress)
        if as_json:
            _emit_json(result)
        else:
            click.echo(reports.units_text(result))
        return
    if models:
        raise click.UsageError("--model applies with --unit")

    report, written = api.measure(
        pairs=pairs, chunkers=chunkers, config_path=config_path, from_git=from_git, paths=paths, lang=lang, bands=bands,
        limit=limit, calibrate=calibrate, target_median=target_median, queries=queries, corpus=corpus, cache=cache,
        pool=pool, seed=seed, report_dir=report_dir, rechunk=rechunk, progress=progress,
    )
    if as_json:
        _emit_json(report.as_dict())
    else:
        click.echo(reports.measure_text(report))
    if written and not as_json:
        click.echo("reports: " + ", ".join(str(p) for p in written))


TASK_RUNNER_OPTION = click.option(
    "--task-runner", default="threads", show_default=True, metavar="SPEC",
    help="How apply runs shards: threads, threads:N, dask (local threads), dask-processes[:N], dask:tcp://HOST:PORT "
         "or prefect-pool:POOL[:N] (flow runs on a work pool's workers).",
)


@main.command()
@CONFIG_OPTION
@click.option("--pool", default="reindex", show_default=True, help="Prefect process work pool (created if missing).")
@click.option("--plans-dir", default=None, help="Plans folder (default: plans/ beside the config).")
@click.option("--timezone", default="UTC", show_default=True, help="Time zone of the schedules (IANA name).")
@TASK_RUNNER_OPTION
@click.option("--no-schedules", is_flag=True, help="Create the deployments without schedules (run them by hand).")
@click.option("--notify-webhook", default=None, metavar="URL",
              help="Post to this webhook whenever a run pauses for approval (a Prefect automation).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def deploy(config_path: str, pool: str, plans_dir: str | None, timezone: str, task_runner: str, no_schedules: bool,
           notify_webhook: str | None, as_json: bool) -> None:
    """Create Prefect deployments (hourly sync, weekly reindex, daily gc) for the config's index.

    Talks to the Prefect API in PREFECT_API_URL; prints the commands that come next.

    \b
    Example:
      PREFECT_API_URL=http://127.0.0.1:4200/api reindex deploy -c reindex.yaml --pool reindex
    """
    from reindex import orchestration

    r = orchestration.deploy(config_path, pool=pool, plans_dir=plans_dir, timezone=timezone, task_runner=task_runner,
                             schedules=not no_schedules, notify_webhook=notify_webhook)
    if as_json:
        _emit_json(r.as_dict())
        return
    click.echo(f"deployed for index {r.index} ({r.config}) on work pool {r.pool}:")
    for name in r.deployments:
        click.echo(f"  {name}")
    click.echo(f"runs of {r.index} never overlap (global concurrency limit {r.concurrency_limit}, 1 slot)")
    click.echo("next:")
    for cmd in r.next_commands:
        click.echo(f"  {cmd}")


@main.command("deploy-shards")
@click.option("--pool", default="reindex", show_default=True, help="Prefect process work pool (created if missing).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def deploy_shards(pool: str, as_json: bool) -> None:
    """Create the reindex-shard/POOL deployment: `--task-runner prefect-pool:POOL` then runs an apply's
    shards as flow runs that any worker of the pool picks up.

    Talks to the Prefect API in PREFECT_API_URL. Needs no config (each flow run gets its shards as plain
    data); the workers need this project installed and must reach the state, the source and the store.

    \b
    Example:
      PREFECT_API_URL=http://127.0.0.1:4200/api reindex deploy-shards --pool gpu
      prefect worker start --pool gpu --type process
      reindex apply plans/2026-11-29-docs-pipeline-scoped-text-1a2b3c4d.json --task-runner prefect-pool:gpu
    """
    from reindex import orchestration

    r = orchestration.deploy_shards(pool)
    if as_json:
        _emit_json(r.as_dict())
        return
    click.echo(f"deployed {', '.join(r.deployments)} on work pool {r.pool}")
    click.echo("next:")
    for cmd in r.next_commands:
        click.echo(f"  {cmd}")


@main.command()
@CONFIG_OPTION
@click.option("--plans-dir", default=None, help="Plans folder (default: plans/ beside the config).")
@click.option("--timezone", default="UTC", show_default=True, help="Time zone of the schedules (IANA name).")
@TASK_RUNNER_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print what is served as JSON (one line) before serving.")
def serve(config_path: str, plans_dir: str | None, timezone: str, task_runner: str, as_json: bool) -> None:
    """Serve the sync, reindex and gc flows of the config's index from this process (no worker needed).

    Runs until Ctrl-C. Scheduled runs start here; paused runs wait for approval in the Prefect UI.

    \b
    Example:
      reindex serve -c reindex.yaml
    """
    from reindex import orchestration

    r = orchestration.serve_plan(config_path, plans_dir=plans_dir, timezone=timezone, task_runner=task_runner)
    if as_json:  # one line: a script reading stdout gets the document before the process blocks
        click.echo(json.dumps(r.as_dict(), ensure_ascii=False))
        orchestration.serve(config_path, plans_dir=plans_dir, timezone=timezone, task_runner=task_runner)
        return
    click.echo(f"serving {', '.join(r.deployments)} (Ctrl-C stops); next, in another shell:")
    for cmd in r.next_commands:
        click.echo(f"  {cmd}")
    orchestration.serve(config_path, plans_dir=plans_dir, timezone=timezone, task_runner=task_runner)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
