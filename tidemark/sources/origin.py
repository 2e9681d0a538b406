"""Where a view began reading a log source: its *origin*, ``{part: offset}``, kept in the
view's checkpoint folder (``sources/origin-<binding>.json``) when its first batch is planned.

* a run that starts again before its first batch committed starts from the same offsets
  (``starting_offsets: latest`` does not move on with each attempt);
* ``tidemark rebuild`` builds the edited view from the live view's origin, and refuses first
  when the log no longer holds it (:func:`check_replayable`);
* ``tidemark adopt`` sets the origin to the log's end: the adopted table holds what the log
  held when it ran.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Optional

from tidemark.files import filesystem
from tidemark.sources.log import Bounds, Offsets


def origin_path(checkpoint: str, binding: int) -> str:
    return f"{checkpoint.rstrip('/')}/sources/origin-{binding}.json"


def read_origin(path: str) -> Optional[Offsets]:
    fs, where = filesystem(path)
    try:
        with fs.open_input_stream(where) as f:
            found = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        return None
    return {str(p): int(o) for p, o in found.items()} if isinstance(found, dict) else None


def write_origin(path: str, offsets: Mapping[str, int]) -> None:
    """Write the origin whole (a temporary file renamed over it)."""
    import uuid

    fs, where = filesystem(path)
    fs.create_dir(where.rpartition("/")[0], recursive=True)
    tmp = f"{where}.tmp-{uuid.uuid4().hex}"
    with fs.open_output_stream(tmp) as f:
        f.write(json.dumps(dict(sorted(offsets.items()))).encode("utf-8"))
    fs.move(tmp, where)


def check_replayable(kind: str, name: str, origin: Mapping[str, int], bounds: Mapping[str, Bounds]) -> list[str]:
    """What of the view's input, from ``origin`` on, the log no longer holds (one line per
    part; empty: all of it is there)."""
    out = []
    for part, at in sorted(origin.items()):
        held = bounds.get(part)
        if held is None:
            out.append(f"{kind} {name}: {part} no longer exists (the view read it from offset {at})")
        elif held.earliest > at:
            out.append(
                f"{kind} {name}: {part} holds offsets from {held.earliest} on; the view read it from offset {at}"
            )
    return out


def log_bindings(spec, mat) -> list[tuple[int, Any]]:
    """(binding index, source) of the materialization's bindings that read a log."""
    out = []
    for i, b in enumerate(mat.bindings):
        src = spec.collections[b.source].source
        if src is not None and src.log:
            out.append((i, src))
    return out


def carry_to_rebuild(spec, mat, live: str, shadow: str) -> None:
    """Before a rebuild builds anything: refuse when a log source no longer holds what the live
    view read from its origin on (naming each part and the offsets), else give the shadow the
    live view's origins, so that it reads what the live view read."""
    from tidemark.errors import SpecError
    from tidemark.sources import open_log

    problems, carried = [], []
    for i, src in log_bindings(spec, mat):
        origin = read_origin(origin_path(live, i))
        if origin is None:  # a view that began before origins were kept: from the log's start
            continue
        log = open_log(src.log, src.log_config)
        try:
            problems += check_replayable(src.log, log.name, origin, log.bounds())
        finally:
            log.close()
        carried.append((i, origin))
    if problems:
        raise SpecError(
            f"materialization {mat.name!r}: a rebuild reads the view's input again from where it began, and the "
            "log no longer holds all of it: " + "; ".join(problems) + ". Keep the view as it is (it holds what was "
            "read), or start it over from what the log holds now (tidemark reset). Nothing was changed"
        )
    for i, origin in carried:
        write_origin(origin_path(shadow, i), origin)


def adopt_origins(spec, mat, location: str, since_given: bool) -> None:
    """An adopt's origins: each log source's end now (the adopted table holds what came before)."""
    from tidemark.errors import SpecError
    from tidemark.sources import open_log
    from tidemark.sources.log import initial

    bindings = log_bindings(spec, mat)
    if bindings and since_given:
        raise SpecError(
            f"materialization {mat.name!r}: --since applies to file sources; an adopted view of a log source "
            "reads from the log's end when adopt runs. Nothing was changed"
        )
    for i, src in bindings:
        if read_origin(origin_path(location, i)) is None:
            log = open_log(src.log, src.log_config)
            try:
                write_origin(origin_path(location, i), initial(log.bounds(), "latest"))
            finally:
                log.close()
