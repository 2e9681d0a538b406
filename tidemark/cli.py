"""The ``tidemark`` command: a thin layer over :mod:`tidemark.ops` (check, status, reset, scale: no Spark)
and :mod:`tidemark.spark.runner` (run; the commands that start Spark are in :mod:`tidemark.cli_spark`,
what every command shares in :mod:`tidemark.cli_common`)."""

from __future__ import annotations

import sys
from typing import Any, Callable, Iterable, List, Optional, cast

import typer
from rich.markup import escape

from tidemark import cli_spark  # noqa: F401 - registers run, adopt and rebuild: the first commands --help lists
from tidemark.cli_common import _fail, app, console, out
from tidemark.errors import TidemarkError


def _print_lines(lines: Callable[[], Iterable[str]]) -> None:
    """Print each of ``lines()``; a TidemarkError ends the command with its message."""
    try:
        for line in lines():
            out.print(escape(line), highlight=False)
    except TidemarkError as exc:
        _fail(exc)


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

    from tidemark.status import status_of_checkpoint, status_of_spec
    from tidemark.status_render import render

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

    _print_lines(lambda: check_spec(spec))


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
    from tidemark.ops_reset import reset_plans, reset_spec

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
    _print_lines(lambda: reset_spec(spec, materialization or None))


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
