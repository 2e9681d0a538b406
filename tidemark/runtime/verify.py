"""``tidemark verify``: is the view what its committed input reduces to?  Without Spark.

The view's committed input is read again from what the checkpoint records of it: for a file
source, the files Spark's file-source log put into batches ``0..N`` (N: the last batch the
recovery log holds), batch by batch, each batch's files in path order and each file's lines
in order (tidemark's source order); for a log source, each part's offsets from where the view
began (:mod:`tidemark.sources.origin`) to where batch N ended.  An adopted view starts from the
adopted rows, and its batch 0 skips the files the adopted table held.  Every document is
parsed and validated as a run does (one that is not valid was quarantined or failed its run:
it is not in the view), reduced per key in that order with the collection's reductions, and
the result compared with what the endpoint holds (``Driver.dump``), per binding: keys missing
from the endpoint, keys it holds that the input does not give, documents that differ.

The endpoint is read at batch N: if a run commits a batch while it is read, the read is done
again (a few times) until the recovery log names the same batch before and after it.
"""

from __future__ import annotations

import json
import os
import random
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterator, Optional, Sequence, cast

from tidemark.errors import SpecError, TidemarkError
from tidemark.protocol.messages import JsonObject, Key

if TYPE_CHECKING:
    from tidemark.collection.collection import Collection
    from tidemark.runtime.adoption import AdoptRecord
    from tidemark.spec import SourceSpec, TidemarkSpec

SHOWN = 5  # differences shown per kind and binding
UNREADABLE = ("webhook",)  # endpoints whose view only the receiver holds
VERIFIED = "verified.json"  # in <checkpoint>/tidemark: the last verify's result (tidemark status)


@dataclass
class BindingResult:
    resource: str
    keys: int  # keys compared
    equal: int
    missing: list[list[Any]] = field(default_factory=list)  # [key, recomputed document] (first SHOWN)
    extra: list[list[Any]] = field(default_factory=list)  # [key, held document]
    differ: list[list[Any]] = field(default_factory=list)  # [key, [(path, recomputed, held), ...]]
    counts: dict[str, int] = field(default_factory=dict)  # missing, extra, differ, invalid (skipped input)

    @property
    def ok(self) -> bool:
        return not (self.counts.get("missing") or self.counts.get("extra") or self.counts.get("differ"))


@dataclass
class Verified:
    materialization: str
    batch: Optional[int]
    at: float
    bindings: list[BindingResult]
    documents: int  # source documents read

    @property
    def ok(self) -> bool:
        return all(b.ok for b in self.bindings)

    def as_json(self) -> JsonObject:
        out = asdict(self)
        out["ok"] = self.ok
        return out


def canonical(value: Any) -> Any:
    """A value to compare: numbers by value (2.0 is 2), objects by their members."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, dict):
        return {k: canonical(v) for k, v in value.items() if k != "_meta"}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


def differences(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    """(pointer, recomputed, held) of each place where ``a`` and ``b`` differ (``…`` absent)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += differences(a.get(k, "…"), b.get(k, "…"), f"{path}/{k}")
        return out
    return [] if a == b else [(path or "/", a, b)]


# ----------------------------------------------------------------------------- the input


def file_batches(checkpoint: str, source: int, last: int) -> list[list[str]]:
    """The files of each Spark batch ``0..last`` of file source ``source``, in path order."""
    from tidemark.runtime.identity import SparkCheckpoint

    spark = SparkCheckpoint(checkpoint.rstrip("/") + "/spark")
    logged: dict[int, set[str]] = {}  # (a compacted log, N.compact, repeats the entries of the files before it)
    root = f"{spark.root}/sources/{source}"
    from pyarrow import fs as pafs

    for info in spark.fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        name = info.base_name
        if name.startswith(".") or name.endswith((".tmp", ".crc")):
            continue
        for line in (spark._text(f"sources/{source}/{name}") or "").splitlines()[1:]:
            entry = json.loads(line)
            logged.setdefault(int(entry["batchId"]), set()).add(entry["path"])
    out, previous = [], -1
    for batch in range(last + 1):
        offsets = spark.source_offsets(batch)
        end = offsets[source].get("logOffset") if source < len(offsets) and isinstance(offsets[source], dict) else None
        if end is None:
            raise SpecError(f"the checkpoint's batch {batch} has no offsets of source {source}: it cannot be verified")
        out.append(sorted({p for b in range(previous + 1, end + 1) for p in logged.get(b, ())}))
        previous = end
    return out


def _local(uri: str) -> str:
    return "/" + uri[len("file:") :].lstrip("/") if uri.startswith("file:") else uri


def file_lines(batches: Sequence[Sequence[str]], since: Optional[float]) -> Iterator[tuple[str, str]]:
    """(line, location) of the batches' files in order; ``since``: batch 0 skips files modified
    up to then (an adopted view's table holds them)."""
    for n, files in enumerate(batches):
        for uri in files:
            path = _local(uri)
            if n == 0 and since is not None and os.path.getmtime(path) <= since:
                continue
            with open(path, encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    if line.strip():
                        yield line, f"{path}:{i}"


def log_lines(
    src: SourceSpec, pointers: Sequence[str], checkpoint: str, binding: int, last: int
) -> Iterator[tuple[str, str]]:
    """(document text, location) of a log source from the view's origin to batch ``last``'s end."""
    from tidemark.sources import open_log
    from tidemark.sources.lag import committed_offsets
    from tidemark.sources.log import key_document, ranges
    from tidemark.sources.origin import origin_path, read_origin

    origin = read_origin(origin_path(checkpoint, binding)) or {}
    offsets = committed_offsets(checkpoint, last)
    end = offsets[binding] if binding < len(offsets) and isinstance(offsets[binding], dict) else {}
    log = open_log(cast(str, src.log), src.log_config)  # a log source (the caller checked src.log)
    try:
        for part, start, stop in ranges(origin, end, log.bounds()):
            for rec in log.read(part, start, stop):
                where = f"{part}@{rec.offset}"
                if rec.value is None:
                    yield json.dumps(key_document(pointers, rec.key, where)), where
                else:
                    yield rec.value.decode("utf-8", "replace"), where
    finally:
        log.close()


def recompute(
    collection: Collection, lines: Iterator[tuple[str, str]], keys: Optional[set[str]] = None
) -> tuple[dict[str, Any], int, int]:
    """({key JSON: document} the lines reduce to, documents read, documents not valid);
    ``keys``: only these keys (JSON texts of the key's values)."""
    from tidemark.errors import DocumentError

    view: dict[Key, Any] = {}
    read = invalid = 0
    for line, where in lines:
        read += 1
        try:
            doc = collection.parse(line, where)
            if collection.validate(doc):
                invalid += 1
                continue
            key = collection.extract_key(doc, where)
        except DocumentError:
            invalid += 1
            continue
        if keys is not None and json.dumps(list(key)) not in keys:
            continue
        held = view.get(key)
        view[key] = doc if held is None else collection.reduce(held, doc)
    out = {json.dumps(list(k)): collection.finish(d) for k, d in view.items() if not collection.is_deletion(d)}
    return out, read, invalid


def compare(
    resource: str, want: dict[str, Any], held: dict[str, Any], keys: Optional[set[str]] = None
) -> BindingResult:
    if keys is not None:
        want = {k: v for k, v in want.items() if k in keys}
        held = {k: v for k, v in held.items() if k in keys}
    result = BindingResult(resource, len(set(want) | set(held)), 0)
    missing = sorted(set(want) - set(held))
    extra = sorted(set(held) - set(want))
    differ = []
    for k in sorted(set(want) & set(held)):
        a, b = canonical(want[k]), canonical(held[k])
        if a == b:
            result.equal += 1
        else:
            differ.append([k, differences(a, b)])
    result.missing = [[k, want[k]] for k in missing[:SHOWN]]
    result.extra = [[k, held[k]] for k in extra[:SHOWN]]
    result.differ = differ[:SHOWN]
    result.counts = {"missing": len(missing), "extra": len(extra), "differ": len(differ)}
    return result


def verify(
    spec: TidemarkSpec, name: str, *, keys: Sequence[str] = (), sample: Optional[int] = None, attempts: int = 3
) -> Verified:
    """Recompute view ``name`` of ``spec`` from its committed input and compare it with the
    endpoint (see the module).  ``keys``: only these (a key's value, or its values as a JSON
    array); ``sample``: that many keys the endpoint holds, at random."""
    from tidemark.collection.collection import collections_of
    from tidemark.drivers.registry import load_driver
    from tidemark.ops import bound
    from tidemark.runtime.adoption import read_record
    from tidemark.runtime.recovery_log import RecoveryLog

    if name not in spec.materializations:
        raise SpecError(f"unknown materialization {name!r} (known: {', '.join(sorted(spec.materializations))})")
    mat = spec.materializations[name]
    if mat.driver_name in UNREADABLE:
        raise SpecError(
            f"{name}: the {mat.driver_name} endpoint keeps nothing tidemark can read back (the receiver holds the "
            "view): it cannot be verified"
        )
    location = spec.checkpoint_location(name)
    colls = collections_of(spec, mat)
    bindings = bound(spec, mat)
    for b in mat.bindings:
        src = spec.collections[b.source].source
        if src is None or not (src.path or src.log):
            raise SpecError(f"{name}: collection {b.source!r} has no source in the spec: verify reads a spec's sources")
        if src.select:
            raise SpecError(
                f"{name}: collection {b.source!r} derives its documents with select: (Spark SQL); verify recomputes "
                "without Spark and cannot verify it yet"
            )
    log = RecoveryLog(location, name, create=False)
    wanted = {k if k.startswith("[") else json.dumps([k]) for k in keys} or None
    with load_driver(mat.driver_name, mat.driver_config) as driver:
        for _ in range(attempts):
            entry, _torn = log.peek_last()
            batch = None if entry is None else entry.batch_id
            held = [
                {json.dumps(list(k)): d for k, d in dict(driver.dump(name, bs)).items()} if not bs.delta_updates else {}
                for bs in bindings
            ]
            again, _ = log.peek_last()
            if (None if again is None else again.batch_id) == batch:
                break
        else:
            raise TidemarkError(f"{name}: a run committed a batch each time the endpoint was read; verify again")
    if sample is not None:
        pool = sorted(set().union(*held)) if held else []
        wanted = set(random.sample(pool, min(sample, len(pool))))
    adoption = read_record(location)
    results, documents = [], 0
    for i, (b, c, bs) in enumerate(zip(mat.bindings, colls, bindings)):
        src = cast("SourceSpec", spec.collections[b.source].source)  # checked above: not None
        if bs.delta_updates:
            continue  # rows appended per change: nothing to reduce to
        if batch is None:
            lines: Iterator[tuple[str, str]] = iter(())
        elif src.log:
            lines = log_lines(src, c.key, location, i, batch)
        else:
            lines = file_lines(file_batches(location, i, batch), adoption.since if adoption else None)
        if adoption is not None:
            lines = _adopted_first(adoption, location, i, lines)
        want, read, invalid = recompute(c, lines, wanted)
        documents += read
        result = compare(".".join(map(str, bs.resource_path)), want, held[i], wanted)
        result.counts["invalid"] = invalid
        results.append(result)
    out = Verified(name, batch, time.time(), results, documents)
    _record(location, out)
    return out


def _adopted_first(
    adoption: AdoptRecord, location: str, binding: int, lines: Iterator[tuple[str, str]]
) -> Iterator[tuple[str, str]]:
    from tidemark.runtime.adoption import folder

    for b in adoption.bindings:
        if b.binding == binding:
            with open(os.path.join(folder(location), b.file), encoding="utf-8") as f:
                for i, line in enumerate(f, 1):
                    yield line, f"adopted row {i}"
    yield from lines


def _record(location: str, result: Verified) -> None:
    if "://" in location:
        return
    from tidemark.files import write_atomically

    summary = {
        "at": result.at,
        "batch": result.batch,
        "ok": result.ok,
        "keys": sum(b.keys for b in result.bindings),
        "differences": sum(b.counts["missing"] + b.counts["extra"] + b.counts["differ"] for b in result.bindings),
    }
    folder = os.path.join(location, "tidemark")
    if os.path.isdir(folder):
        write_atomically(os.path.join(folder, VERIFIED), json.dumps(summary).encode("utf-8"))


def last_verified(location: str) -> Optional[JsonObject]:
    """The last verify's summary (``tidemark status``), or None."""
    try:
        with open(os.path.join(location, "tidemark", VERIFIED), encoding="utf-8") as f:
            found = json.load(f)
        return found if isinstance(found, dict) else None
    except (OSError, ValueError):
        return None


def render(result: Verified) -> list[str]:
    """What ``tidemark verify`` prints."""
    as_of = "no batch committed yet" if result.batch is None else f"as of batch {result.batch}"
    lines = [f"{result.materialization}: {as_of}, {result.documents} source document(s) read again"]
    for b in result.bindings:
        counts = b.counts
        if b.ok:
            lines.append(f"  {b.resource}: {b.keys} key(s), all equal")
        else:
            lines.append(
                f"  {b.resource}: {counts['differ']} differ, {counts['missing']} missing, {counts['extra']} extra "
                f"of {b.keys} key(s)"
            )
        for key, diffs in b.differ:
            shown = "; ".join(
                f"{p}: {json.dumps(x)} (from the input) != {json.dumps(y)} (held)" for p, x, y in diffs[:3]
            )
            lines.append(f"    differs {key}: {shown}")
        for key, doc in b.missing:
            lines.append(f"    missing {key}: {json.dumps(doc, sort_keys=True)[:200]}")
        for key, doc in b.extra:
            lines.append(f"    extra   {key}: {json.dumps(doc, sort_keys=True)[:200]}")
        if counts.get("invalid"):
            lines.append(f"    ({counts['invalid']} source document(s) not valid: not in the view)")
    lines.append(
        "equal" if result.ok else 'the view differs from its input: see docs/operations.md, "Verifying a view"'
    )
    return lines
