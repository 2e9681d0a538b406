"""The ``tidemark`` command: a thin layer over :mod:`tidemark.ops` (check, status, reset, scale: no Spark)
and :mod:`tidemark.spark.runner` (run)."""

from __future__ import annotations

import sys
import time
from typing import Any, Iterable, List, Optional, Sequence, cast

import typer
from rich.console import Console
from rich.markup import escape

from tidemark.errors import TidemarkError, from_task_failure, infrastructure_error
from tidemark.interrupt import Interruptible as _interruptible
from tidemark.interrupt import say_long_batches as _say_long_batches
from tidemark.options import set_process_option

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Exactly-once materialized views of streams on Spark.",
    context_settings={"help_option_names": ["-h", "--help"]},
)
# soft_wrap: a line is never cut at the terminal's (or, off a terminal, 80) columns: logs stay greppable
console = Console(stderr=True, soft_wrap=True)
out = Console(soft_wrap=True)
_state = {"verbose": False}


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            out.print(f"tidemark {version('tidemark')}", highlight=False)
        except PackageNotFoundError:  # pragma: no cover - run from a source tree
            out.print("tidemark (not installed)", highlight=False)
        raise typer.Exit()


@app.callback()
def _options(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="print tracebacks with errors"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
):
    _state["verbose"] = verbose


def _fail(exc: BaseException) -> None:
    """One clear message and exit code 1; the traceback only with ``--verbose``."""
    import logging
    import traceback

    logging.getLogger("tidemark").debug("error", exc_info=exc)
    if _state["verbose"]:
        console.print(escape("".join(traceback.format_exception(exc))), highlight=False, soft_wrap=True)
    console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
    raise typer.Exit(1)


def _user_error(exc: BaseException, places: Sequence[str] = ()) -> "TidemarkError | None":
    """The tidemark error behind ``exc`` (raised here, or in a Spark task), if any; else the
    infrastructure failure it is, in one line (``places``: the checkpoint folders)."""
    err = exc if isinstance(exc, TidemarkError) else from_task_failure(exc)
    return err if err is not None else infrastructure_error(exc, places)


@app.command()
def run(
    spec: str = typer.Argument(..., help="the spec file (YAML or JSON)"),
    available_now: bool = typer.Option(False, "--available-now", help="process the input that is there, then exit 0"),
    materialization: Optional[List[str]] = typer.Option(None, "--materialization", "-m", help="run only these"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
    max_files_per_trigger: Optional[int] = typer.Option(None, "--max-files-per-trigger", help="files per batch"),
    metrics_port: Optional[str] = typer.Option(
        None,
        "--metrics-port",
        help="serve Prometheus metrics at http://HOST:PORT/metrics (PORT, or HOST:PORT; 0 picks a port)",
    ),
    conf: Optional[List[str]] = typer.Option(
        None, "--conf", help="a Spark setting KEY=VALUE (repeatable), e.g. --conf spark.executor.memory=4g"
    ),
    spark_ui: bool = typer.Option(
        True, "--spark-ui/--no-spark-ui", help="Spark's web UI (http://localhost:4040, the next free port when taken)"
    ),
):
    """Run the materializations of SPEC, with live progress.  Ctrl-C stops it (exit code 130);
    every batch committed by then stays, and the next run goes on from there."""
    from tidemark.ops import check_spec, pending_files, take_leases
    from tidemark.spec import load_spec

    started = time.perf_counter()
    totals = {"batches": 0, "documents": 0}
    last_batches: dict = {}

    try:
        parsed = load_spec(spec)
        spark_conf = _spark_conf(conf or [], spark_ui)
    except TidemarkError as exc:
        _fail(exc)

    def on_batch(r):
        totals["batches"] += 1
        last_batches[r.materialization] = r.batch_id
        lag = pending_files(parsed, r.materialization)
        totals["documents"] += r.documents
        rate = r.documents / r.wall if r.wall > 0 else 0.0
        phases = " ".join(f"{k}={v:.2f}s" for k, v in r.timings.items() if not k.startswith("shard."))
        if r.skipped:
            console.print(f"[dim]{r.materialization} batch {r.batch_id}: already committed, acknowledged[/]")
            return
        console.print(
            f"[bold]{r.materialization}[/] batch [cyan]{r.batch_id}[/]: {r.documents} docs "
            f"({rate:,.0f}/s), {r.keys} keys over {r.shards} shard(s), stored {r.stored}, "
            f"loaded {r.loaded}, deleted {r.deleted}"
            + (f", [yellow]{r.invalid} quarantined[/]" if r.invalid else "")
            + (f", {r.replayed_shards} shard(s) already committed" if r.replayed_shards else "")
            + f" | {phases}"
            + ("" if lag is None else f" | lag {lag} file(s)"),
            soft_wrap=True,
        )

    from tidemark.faults import pin_group

    pin_group()
    with _interruptible() as stop:
        stop.last_batches = last_batches
        try:
            from tidemark.spark.runner import run_spec
            from tidemark.spark.session import local_session

            # one live run per checkpoint: the leases first, so that a second run is refused at
            # once (the run's coordinators take them over in this process when Spark is up)
            leases = take_leases(parsed, materialization or None)  # the spec as read once, above
            stop.leases = leases
            # the endpoints next (credentials, reachability, the tables), before Spark starts
            check_spec(parsed, materialization or None, to_run=True)
            for n in materialization or list(parsed.materializations):
                if n in parsed.materializations:
                    waiting = pending_files(parsed, n)
                    console.print(
                        f"{n}: endpoint {parsed.materializations[n].driver_name} ready"
                        + ("" if waiting is None else f", {waiting} file(s) waiting"),
                        highlight=False,
                    )
            console.print(
                f"starting Spark ({master or 'local[*]'}; the first batch starts when it is up)", highlight=False
            )
            if _state["verbose"]:  # Spark's own logging too: failed task attempts, their stacks
                set_process_option("spark_log_defaults", True)
            spark = local_session("tidemark", master=master or "local[*]", **spark_conf)
            stop.started(spark)
            _say_long_batches(stop)
            # Spark logs a failed batch with every stack trace; the CLI prints the one message.
            spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
            run_spec(
                parsed,
                available_now=available_now,
                materializations=materialization or None,
                spark=spark,
                on_batch=on_batch,
                max_files_per_trigger=max_files_per_trigger,
                metrics_port=metrics_port,
                on_metrics=lambda url: console.print(f"metrics: {url}", highlight=False),
            )
        except KeyboardInterrupt:
            stop.finish()
        except Exception as exc:
            if stop.requested:
                stop.finish()
            places = [parsed.checkpoint_location(n) for n in materialization or parsed.materializations]
            err = _user_error(exc, places)
            if err is None:
                raise
            _fail(err)
        finally:
            for lease in getattr(stop, "leases", ()):
                lease.release()  # (a lease its coordinator took over is the coordinator's to give back)
        if stop.requested:
            stop.finish()
    console.print(
        f"[green]done[/]: {totals['batches']} batch(es), {totals['documents']} documents in "
        f"{time.perf_counter() - started:.1f}s"
    )


@app.command()
def adopt(
    spec: str = typer.Argument(..., help="the spec file"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the materialization"),
    from_: List[str] = typer.Option(
        ...,
        "--from",
        help="the existing table (NAME or SCHEMA.NAME; a Delta "
        "table's path) or SELECT query whose rows become the view; with several "
        "bindings RESOURCE=TABLE_OR_QUERY, repeated",
    ),
    since: Optional[str] = typer.Option(
        None,
        "--since",
        help="the table holds the input up to this time "
        "(RFC 3339 or epoch seconds; default: now): source files modified "
        "later are reduced on top",
    ),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
):
    """Start a view from a table that exists (a hand-written upsert's): its rows become the
    view's batch 0, and `tidemark run` reduces only newer input on top, exactly once.
    Stopped part-way, the same command finishes it."""
    from tidemark.faults import pin_group
    from tidemark.spark.adopt import adopt as do_adopt
    from tidemark.spark.adopt import parse_from

    pin_group()
    try:
        sources = parse_from(from_)
        from tidemark.spark.session import local_session

        def session():  # made once the table is read and checked
            if _state["verbose"]:
                set_process_option("spark_log_defaults", True)
            spark = local_session("tidemark", master=master or "local[*]", **{"spark.ui.enabled": "false"})
            spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
            return spark

        result = do_adopt(spec, materialization=materialization, from_=sources, since=since, spark=session)
    except Exception as exc:
        err = _user_error(exc)
        if err is None:
            raise
        _fail(err)
    rows = ", ".join(f"{n} row(s) into {r}" for r, n in result["rows"].items())
    batch = result["batch"]
    newer = batch.documents - sum(result["rows"].values()) if batch is not None else 0
    on_top = f"; {newer} newer document(s) reduced on top" if newer > 0 else ""
    out.print(
        f"adopted {rows} as batch 0 (the input up to {result['since']}){on_top}; `tidemark run` goes on from there",
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def rebuild(
    spec: str = typer.Argument(..., help="the spec file, as edited"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the materialization"),
    abandon: bool = typer.Option(False, "--abandon", help="drop the shadow of the rebuild in progress, nothing else"),
    master: Optional[str] = typer.Option(None, "--master", help="Spark master (default local[*])"),
    wait: float = typer.Option(
        600.0, "--wait", help="seconds the cut-over waits for the live run to stop when asked (0: do not ask)"
    ),
):
    """Change a live view without taking it away: build the edited spec into shadow resources
    while the live view keeps running, then replace the live contents in one endpoint
    transaction. For the cut-over the live `tidemark run` is asked to stop at its next batch
    boundary (it exits with code 75; start it again with the edited spec). Stopped part-way,
    the same command goes on; --abandon drops only the shadow."""
    from tidemark.faults import pin_group
    from tidemark.spark.rebuild import rebuild as do_rebuild

    pin_group()

    def session():  # made only if something is built
        from tidemark.spark.session import local_session

        if _state["verbose"]:
            set_process_option("spark_log_defaults", True)
        spark = local_session("tidemark-rebuild", master=master or "local[*]", **{"spark.ui.enabled": "false"})
        spark.sparkContext.setLogLevel("ERROR" if _state["verbose"] else "FATAL")
        return spark

    def on_batch(r):
        console.print(
            f"{r.materialization} batch {r.batch_id}: "
            + ("already committed" if r.skipped else f"{r.documents} docs, {r.keys} keys, stored {r.stored}"),
            highlight=False,
        )

    try:
        said = do_rebuild(
            spec,
            materialization=materialization,
            spark=session,
            abandon=abandon,
            wait=wait,
            on_batch=on_batch,
            say=lambda line: console.print(escape(line), highlight=False, soft_wrap=True),
        )
    except Exception as exc:
        err = _user_error(exc)
        if err is None:
            raise
        _fail(err)
    out.print(escape(said), highlight=False, soft_wrap=True)


def _spark_conf(pairs: List[str], ui: bool) -> dict:
    """``--conf KEY=VALUE`` settings (and ``--spark-ui``) as a dict for the SparkSession."""
    out = {"spark.ui.enabled": "true" if ui else "false"}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip().startswith("spark."):
            raise TidemarkError(f"--conf takes KEY=VALUE with a Spark key (spark.…), got {pair!r}")
        out[key.strip()] = value
    return out


@app.command()
def status(
    spec: Optional[str] = typer.Argument(None, help="the spec file (or give --checkpoint)"),
    checkpoint: Optional[str] = typer.Option(
        None, "--checkpoint", help="a view's checkpoint folder (views made with tidemark.materialize(df, ...))"
    ),
    materialization: Optional[List[str]] = typer.Option(None, "--materialization", "-m", help="only these"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (one object per materialization, in a list)"),
    kafka_bootstrap: Optional[str] = typer.Option(
        None,
        "--kafka-bootstrap",
        help="with --checkpoint: the Kafka source's bootstrap servers, to count the messages waiting",
    ),
):
    """Is the view behind? Input waiting, last commit, counts and shard ranges."""
    import json
    import shutil

    from tidemark.status import render, status_of_checkpoint, status_of_spec

    if (spec is None) == (checkpoint is None):
        _fail(TidemarkError("give a spec file or --checkpoint DIR (one of them)"))
    try:
        statuses = (
            status_of_spec(spec, materialization or None)
            if spec
            else [status_of_checkpoint(cast(str, checkpoint), kafka=kafka_bootstrap)]  # one of them is given
        )
    except TidemarkError as exc:
        _fail(exc)
    if as_json:
        print(json.dumps([st.as_json() for st in statuses], indent=2))
        return
    width = min(shutil.get_terminal_size((80, 24)).columns, 100)
    for i, st in enumerate(statuses):
        if i:
            print()
        print("\n".join(render(st, width)))


@app.command()
def check(spec: str = typer.Argument(..., help="the spec file")):
    """Validate SPEC and dry-run Validate/Apply against each endpoint."""
    from tidemark.ops import check_spec

    try:
        for line in check_spec(spec):
            out.print(escape(line), highlight=False)
    except TidemarkError as exc:
        _fail(exc)


@app.command()
def verify(
    spec: str = typer.Argument(..., help="the spec file"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the view (one)"),
    key: Optional[List[str]] = typer.Option(None, "--key", help="only this key (repeat; several values: a JSON array)"),
    sample: Optional[int] = typer.Option(None, "--sample", min=1, help="only N keys the view holds, at random"),
    as_json: bool = typer.Option(False, "--json", help="print the result as JSON"),
):
    """Is the view what its committed input reduces to?  Reads the input again (no Spark),
    reduces it and compares with the endpoint; exit code 3 when they differ."""
    import json

    from tidemark.runtime.verify import render, verify
    from tidemark.spec import load_spec

    try:
        parsed = load_spec(spec)
        name = materialization or (next(iter(parsed.materializations)) if len(parsed.materializations) == 1 else None)
        if name is None:
            raise TidemarkError(f"the spec has {len(parsed.materializations)} materializations; name one with -m")
        result = verify(parsed, name, keys=key or (), sample=sample)
    except TidemarkError as exc:
        _fail(exc)
    if as_json:
        print(json.dumps(result.as_json(), indent=2, default=str))
    else:
        for line in render(result):
            out.print(escape(line), highlight=False, soft_wrap=True)
    if not result.ok:
        raise typer.Exit(3)


@app.command()
def reset(
    spec: str = typer.Argument(..., help="the spec file"),
    materialization: Optional[List[str]] = typer.Option(None, "--materialization", "-m", help="only these"),
    yes: bool = typer.Option(False, "--yes", help="do not ask for confirmation"),
):
    """Start views over on purpose: drop their tables or files, endpoint checkpoints and checkpoint folders."""
    from tidemark.ops import reset_plans, reset_spec

    try:
        plans = reset_plans(spec, materialization or None)
    except TidemarkError as exc:
        _fail(exc)
    for plan in plans:
        console.print(escape(plan.describe()), soft_wrap=True, highlight=False)
    if not yes:
        if not sys.stdin.isatty():
            _fail(TidemarkError("refusing to reset without confirmation: pass --yes"))
        if not typer.confirm("Remove all of this? The next run replays the source from its start", default=False):
            raise typer.Exit(1)
    try:
        for line in reset_spec(spec, materialization or None):
            out.print(escape(line), highlight=False)
    except TidemarkError as exc:
        _fail(exc)


@app.command()
def scale(
    spec: str = typer.Argument(..., help="the spec file (or the view's checkpoint folder)"),
    shards: int = typer.Option(..., "--shards", help="the shard count from the next batch on"),
    materialization: Optional[str] = typer.Option(None, "--materialization", "-m", help="the materialization"),
):
    """Rescale a view without a restart: a running query takes the new shard count at its next batch."""
    from tidemark.ops import scale as request

    try:
        req = request(spec, shards=shards, materialization=materialization)
    except TidemarkError as exc:
        _fail(exc)
    out.print(
        f"requested {req['shards']} shard(s) (request {req['id']}): a running query applies it at its "
        "next batch; a stopped one when it runs again",
        soft_wrap=True,
        highlight=False,
    )


@app.command()
def conformance(
    driver: str = typer.Argument(..., help="driver name, e.g. memory, sqlite, postgres, or command:PROGRAM"),
    config: Optional[str] = typer.Option(None, "--config", help="driver config file (YAML/JSON)"),
    quick: bool = typer.Option(False, "--quick", help="fewer scenarios and batches (a smoke test)"),
    seed: int = typer.Option(0, "--seed", help="seed of the randomized workloads"),
    deadline: Optional[float] = typer.Option(
        None,
        "--deadline",
        help="seconds for the whole run (default 300 with --quick, else 900): a driver still "
        "not answering then is reported as stalled",
    ),
    request_wait: float = typer.Option(
        60.0,
        "--request-wait",
        help="seconds the kit waits for the answer to one request before it reports the driver as stalled",
    ),
):
    """Run the conformance kit against a driver: a line per scenario as it goes, then the report."""
    from tidemark.testing.conformance import main as kit_main

    raise typer.Exit(kit_main(driver, config, quick=quick, seed=seed, deadline=deadline, request_wait=request_wait))


@app.command()
def query(
    spec: str = typer.Argument(..., help="the spec file"),
    view: str = typer.Option(..., "--view", help="the view: its resource name, e.g. a table (or MATERIALIZATION/NAME)"),
    key: Optional[List[str]] = typer.Option(
        None, "--key", help="a key as JSON, e.g. '\"c1\"' or '[\"c1\", 2]' (repeatable)"
    ),
    prefix: Optional[str] = typer.Option(None, "--prefix", help="the first key components as a JSON array"),
    isolation: str = typer.Option("read-committed", "--isolation", help="read-committed or read-uncommitted"),
    timeout: float = typer.Option(30.0, "--timeout", help="read-committed: seconds to wait for the shards to agree"),
):
    """Print the documents of a view as JSON lines, in key order (all of them when no --key/--prefix):
    a table's committed rows, a store view, or a nats view (only what progress records cover)."""
    import json

    try:
        keys = [json.loads(k) for k in key or []]
        pre = None if prefix is None else json.loads(prefix)
    except json.JSONDecodeError as exc:
        _fail(TidemarkError(f"--key/--prefix must be JSON: {exc}"))
    if keys and pre is not None:
        _fail(TidemarkError("give --key or --prefix, not both"))
    out = sys.stdout.buffer
    try:
        from tidemark.ops import endpoint_of_view
        from tidemark.spec import load_spec

        endpoint = endpoint_of_view(spec, view)
        pushed = {m.driver_name for m in load_spec(spec).materializations.values()} & {"store", "nats"}
        if endpoint not in (None, "store", "nats") or (endpoint is None and not pushed):
            # a table (or any endpoint that reads itself back), by its driver
            _print_committed(spec, view, keys, pre)
            return
        from tidemark.drivers.nats.query import documents
        from tidemark.drivers.nats.query import find_view as find_nats_view
        from tidemark.spec import load_spec

        hit = find_nats_view(load_spec(spec), view)
        if hit is not None:  # a nats view: the committed documents, read from the stream
            wanted = {tuple(k) if isinstance(k, list) else (k,) for k in keys}
            pre = None if pre is None else (tuple(pre) if isinstance(pre, list) else (pre,))
            for doc in documents(*hit, keys=wanted, prefix=pre):
                out.write(doc + b"\n")
            out.flush()
            return
        from tidemark.drivers.store.query import key_order, open_view  # the store's library only for its views

        with open_view(spec, view, isolation=isolation, timeout=timeout) as v:
            if keys:
                for k in sorted({tuple(k) if isinstance(k, list) else (k,) for k in keys}, key=key_order):
                    for _, doc in v.scan_raw(k):
                        out.write(bytes(doc) + b"\n")
            else:
                for _, doc in v.scan_raw(pre):
                    out.write(bytes(doc) + b"\n")
        out.flush()
    except (TidemarkError, ValueError) as exc:
        _fail(exc)
    except ImportError as exc:  # an endpoint's client library that is not installed
        _fail(TidemarkError(f"{exc} (pip install 'tidemark[all]' installs every endpoint's library)"))


def _print_committed(spec: str, view: str, keys: list, prefix) -> None:
    """The committed documents of a view of any endpoint that reads itself back, in key order."""
    import json

    from tidemark.ops import committed_view

    def key_order(key) -> tuple:  # booleans, then integers, then strings per component
        return tuple((0, v) if isinstance(v, bool) else (1, v) if isinstance(v, int) else (2, str(v)) for v in key)

    _, docs = committed_view(spec, view)
    wanted = {tuple(k) if isinstance(k, list) else (k,) for k in keys}
    pre = None if prefix is None else (tuple(prefix) if isinstance(prefix, list) else (prefix,))
    rows: Iterable[tuple[Any, Any]] = docs.items() if isinstance(docs, dict) else ((None, d) for d in docs)
    if isinstance(docs, dict):
        rows = sorted(rows, key=lambda kv: key_order(kv[0]))
    out = sys.stdout.buffer
    for k, doc in rows:
        if wanted and k not in wanted:
            continue
        if pre is not None and (k is None or k[: len(pre)] != pre):
            continue
        out.write(json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode() + b"\n")
    out.flush()


@app.command()
def tail(
    spec: str = typer.Argument(..., help="the spec file"),
    view: str = typer.Option(..., "--view", help="the binding: its topic (or MATERIALIZATION/TOPIC)"),
):
    """Print what an endpoint committed for one binding, as JSON lines: a Kafka topic's last
    document per key (read_committed, tombstones drop the key), in key order."""
    from tidemark.drivers.store.query import key_order
    from tidemark.jsontext import dumps_bytes
    from tidemark.ops import committed_view

    out = sys.stdout.buffer
    try:
        _, docs = committed_view(spec, view)
        if isinstance(docs, dict):
            try:
                items = sorted(docs.items(), key=lambda kv: key_order(kv[0]))
            except TypeError:
                items = list(docs.items())
            docs = [d for _, d in items]
        for doc in docs:
            out.write(dumps_bytes(doc) + b"\n")
        out.flush()
    except (TidemarkError, ValueError) as exc:
        _fail(exc)


def main() -> None:
    if not sys.stderr.isatty():  # usage errors as plain lines, not boxes drawn for a terminal
        import typer.core

        typer.core.HAS_RICH = False
    try:
        app()
    except TidemarkError as exc:  # pragma: no cover
        console.print(f"[bold red]error:[/] {escape(str(exc))}", soft_wrap=True, highlight=False)
        sys.exit(1)


if __name__ == "__main__":
    main()
