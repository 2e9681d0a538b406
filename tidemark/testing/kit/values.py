"""The kit's value scenarios: every JSON value comes back as it was stored, and keys that
look alike stay apart.

``values``          documents covering every JSON type and edge (``null`` beside absent,
                    empty strings, arrays and objects, floats of 17 digits, ``-0.0``, integers
                    at ±2^53, ±2^63 and beyond, strings of every Unicode plane, NUL,
                    combining marks and trailing spaces, member names that look alike,
                    objects 32 deep, documents from a few bytes to 3 MiB, keys of 1 to 4,096
                    bytes, composite keys) are stored, replaced and deleted over three
                    batches with a crash, Loaded back and dumped; each is compared with what
                    was stored as canonical JSON (property ``round-trip``).  A value beyond a
                    limit the driver declares (:class:`~tidemark.drivers.base.ValueLimits`) is
                    not drawn: instead one is sent alone, and the driver must refuse its batch
                    with an error naming the key, changing nothing (property ``limits``).
``key-collisions``  keys that share their first 255, 767, 1,000 or 3,072 bytes, or differ
                    only in case or Unicode normalization, single and composite: each keeps
                    its own document (property ``keys-exact``).

Two standard bindings: ``values`` (key ``/k``; projected fields of every type, so typed
columns are exercised beside the document) and ``pairs`` (key ``/k``, ``/j``: a string and
a 64-bit integer).  Nothing here imports tidemark.collection: documents are stored whole
(each replaces the key's last one), so the model is a dictionary.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence, cast

from tidemark.drivers.limits import ValueLimits
from tidemark.protocol.messages import Acknowledge, BindingSpec, Field, Flush, Load, StartCommit, Store
from tidemark.testing.kit.edges import EDGES, depth_of, first_difference, has_nul, key_of, nested, show, size_of
from tidemark.testing.kit.runtime import KitRuntime
from tidemark.testing.kit.sessions import KitCrash, Shard, rk
from tidemark.testing.workload import Model, key_hash

VALUES, PAIRS = 0, 1
NAMES = {VALUES: "values", PAIRS: "pairs"}

#: the typed fields of ``values``: name -> JSON Schema type (each also nullable)
TYPED = {"s": "string", "i": "integer", "f": "number", "b": "boolean", "o": "object", "a": "array"}


def value_bindings(tag: str) -> tuple[BindingSpec, ...]:
    """The two bindings, on resources unique to ``tag``."""
    props: dict[str, Any] = {"k": {"type": "string"}}
    props.update({name: {"type": [t, "null"]} for name, t in TYPED.items()})
    schema = {"type": "object", "required": ["k"], "properties": props, "reduce": {"strategy": "lastWriteWins"}}
    fields = (Field("k", "/k", "string", is_key=True, nullable=False),) + tuple(
        Field(name, f"/{name}", t) for name, t in TYPED.items()
    )
    pair_schema = {
        "type": "object",
        "required": ["k", "j"],
        "properties": {"k": {"type": "string"}, "j": {"type": "integer"}},
        "reduce": {"strategy": "lastWriteWins"},
    }
    pair_fields = (
        Field("k", "/k", "string", is_key=True, nullable=False),
        Field("j", "/j", "integer", is_key=True, nullable=False),
    )
    return (
        BindingSpec({"table": f"{tag}_values"}, "kit/values", ("/k",), fields, schema),
        BindingSpec({"table": f"{tag}_pairs"}, "kit/pairs", ("/k", "/j"), pair_fields, pair_schema),
    )


@dataclass(frozen=True)
class Put:
    """An event of the value scenarios: store ``doc`` under ``key`` of ``binding`` (``doc``
    None: delete the key)."""

    binding: int
    key: tuple
    doc: Optional[dict]

    @property
    def where(self) -> str:
        return f"{NAMES[self.binding]} {show(list(self.key), 60)}"


def typed_values(draw: random.Random) -> dict[str, Any]:
    """Values for the typed fields, each of its type (or null, or absent)."""
    pick: dict[str, list[Any]] = {
        "s": [v for v in EDGES.values() if isinstance(v, str)],
        "i": [v for v in EDGES.values() if isinstance(v, int) and not isinstance(v, bool)],
        "f": [v for v in EDGES.values() if isinstance(v, float)],
        "b": [True, False],
        "o": [{}, {"a": None}, nested(4), {"": 1, " ": 2, "\u00e9": 3, "e\u0301": 4}],
        "a": [[], [None], EDGES["mixed array"], ["", ""]],
    }
    out: dict[str, Any] = {}
    for name, choices in pick.items():
        r = draw.random()
        if r < 0.15:
            continue  # absent
        out[name] = None if r < 0.3 else draw.choice(choices)
    return out


def allowed(doc: dict, limits: ValueLimits) -> bool:
    return limits.holds(size_of(doc), has_nul(doc), depth_of(doc))


def value_documents(draw: random.Random, limits: ValueLimits, batch: int) -> list[Put]:
    """One batch's documents: every edge once (alone under ``v``, then all together), typed
    fields drawn around them, null beside absent, nesting, sizes and keys at their edges."""
    tag = f"b{batch}"
    docs: list[tuple[str, dict]] = []
    for i, (name, value) in enumerate(EDGES.items()):
        docs.append((f"edge-{i:02d}", {"v": value, "what": name, **typed_values(draw)}))
    docs.append(("all-edges", {"v": dict(EDGES), **typed_values(draw)}))
    docs.append(("null-member", {"a": None, "o": {"x": None, "y": {}}}))
    docs.append(("absent-member", {"o": {"y": {}}}))
    docs.append(("look-alike-names", {"v": {"": 0, " ": 1, "a": 2, "a ": 3, "A": 4, "\u00e9": 5, "e\u0301": 6}}))
    deep = min(32, limits.max_depth or 32)  # levels, the document's root included
    docs.append((f"deep-{deep}", {"v": nested(deep - 1)}))
    docs.append(("smallest", {}))
    for size in (1024 * 1024 + 7, 3 * 1024 * 1024) if batch == 0 else ():  # stored once, read back at the end
        docs.append((f"size-{size}", {"v": key_of(tag, size)}))
    out: list[Put] = []
    for name, body in docs:
        doc = {"k": f"{name}", **body, "batch": batch}
        if allowed(doc, limits):
            out.append(Put(VALUES, (doc["k"],), doc))
    for size in (1, 2, 255, 256, 1024, 4096):
        k = key_of("", size) if size > 2 else "k"[:size] if size == 1 else "\u00e9"
        if limits.holds_key((k,)):
            out.append(Put(VALUES, (k,), {"k": k, "s": f"key of {size} bytes", "batch": batch}))
    for j in (0, -1, 1, 2**53 + 1, 2**63 - 1, -(2**63)):
        for k in ("", "p", "p ", "P"):
            out.append(Put(PAIRS, (k, j), {"k": k, "j": j, "v": draw.choice(list(EDGES.values())), "batch": batch}))
    return [p for p in out if p.doc is None or not has_nul(p.doc) or limits.nul_in_strings]


def collision_keys(limits: ValueLimits) -> list[str]:
    """Keys that agree on their first 255, 767, 1,000 or 3,072 bytes (a prefix index, a
    VARCHAR(255), InnoDB's prefix limits), ASCII and multi-byte, or differ in case or in
    Unicode normalization only."""
    out: list[str] = []
    for shared in (255, 767, 1000, 3072):
        for base in (key_of("", shared), "x" * shared):
            out += [base + "1", base + "2", base + "\u00e9"]
    out += ["Case", "case", "CASE", "caf\u00e9", "cafe\u0301", "\u212b", "\u00c5", "A\u030a"]
    return [k for k in out if limits.holds_key((k,))]


# ----------------------------------------------------------------------- runtime


class ValueModel(Model):
    """What the endpoint must hold: the last document stored per key, per binding (``docs``)."""

    def __init__(self) -> None:
        super().__init__()
        self.docs: dict[int, dict[tuple, dict]] = {VALUES: {}, PAIRS: {}}

    def commit(self, batch_id: int, events: Sequence[Any]) -> None:
        for e in events:
            if e.doc is None:
                self.docs[e.binding].pop(e.key, None)
            else:
                self.docs[e.binding][e.key] = e.doc
        self.batches.append(batch_id)


class ValuesRuntime(KitRuntime):
    """The kit's runtime over the two value bindings (the same coordinator, sessions, crashes)."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.bindings = value_bindings(self.tag)
        self.values = ValueModel()  # the value scenarios' model
        self.model = self.values
        self.attempted: dict[tuple[int, tuple], list[Optional[dict]]] = {}  # at-least-once: crashed writes
        self.load_chunk = min(16, self.caps.max_load_keys)
        self.store_chunk = min(8, self.caps.max_store_docs)

    @property
    def limits(self) -> ValueLimits:
        return self.caps.limits

    def die(self, events: Any, logged: bool = False) -> None:
        self.crashed = True
        if not self.exactly_once:  # an at-least-once endpoint may show what the dead attempt wrote
            for e in events:
                self.attempted.setdefault((e.binding, e.key), []).append(e.doc)
        for shard in list(self.live):
            self.drop(shard)
        raise KitCrash()

    def transaction(self, shard: Shard, events: Any, kill: Optional[str] = None) -> Iterator[str]:
        """One transaction: Acknowledge, Load every key of the range (each answer checked),
        Flush, Store (replace or delete), StartCommit."""
        key_range, task, sess = shard.range, shard.task, shard.session
        mine: list[Put] = [e for e in events if key_range.contains(key_hash(e.key))]
        shard.updates.append(sess.acknowledge(Acknowledge(state=task.driver_checkpoint)).state)
        yield "acknowledge"
        last: dict[tuple[int, tuple], Put] = {}
        for e in mine:
            last[(e.binding, e.key)] = e
        loaded: dict[tuple[int, tuple], Any] = {}
        for binding in (VALUES, PAIRS):
            keys = sorted({e.key for e in mine if e.binding == binding})
            for i in range(0, len(keys), self.load_chunk):
                chunk = tuple(keys[i : i + self.load_chunk])
                self.tracker(f"the answer to a Load of {len(chunk)} keys of {NAMES[binding]}")
                for reply in sess.load(Load(binding, chunk)):
                    for key, doc in zip(reply.keys, reply.docs):
                        loaded[(reply.binding, tuple(key))] = doc
                yield "load"
        late, flushed = sess.flush(Flush())
        for reply in late:
            for key, doc in zip(reply.keys, reply.docs):
                loaded[(reply.binding, tuple(key))] = doc
        shard.updates.append(flushed.state)
        self.compare_loaded(mine, loaded)
        yield "flush"
        for binding in (VALUES, PAIRS):
            puts = [e for (b, _), e in sorted(last.items(), key=lambda kv: (kv[0][0], kv[0][1])) if b == binding]
            puts = [e for e in puts if e.doc is not None or (binding, e.key) in loaded]
            for i in range(0, len(puts), self.store_chunk):
                part = puts[i : i + self.store_chunk]
                fields = self.bindings[binding].value_fields
                self.tracker(f"the driver reading a Store of {len(part)} documents of {NAMES[binding]}")
                sess.store(
                    Store(
                        binding,
                        tuple(e.key for e in part),
                        tuple(tuple((e.doc or {}).get(f.name) for f in fields) for e in part),
                        tuple(e.doc if e.doc is not None else {"k": e.key[0], "_meta": {"op": "d"}} for e in part),
                        tuple((binding, e.key) in loaded for e in part),
                        tuple(e.doc is None for e in part),
                    )
                )
                yield "store"
        yield "ready"
        self.tracker(f"StartedCommit (range {key_range.name}, batch {task.batch_id})")
        shard.updates.append(sess.start_commit(StartCommit(task.runtime_checkpoint)).state)
        shard.committed = True
        self.started.add(task.batch_id)
        if self.store_authoritative:
            self.endpoint_commits[rk(key_range)] = max(task.batch_id, self.endpoint_commits.get(rk(key_range), -1))
        yield "start_commit"

    def compare_loaded(self, mine: list[Put], loaded: dict[tuple[int, tuple], Any]) -> None:
        view = self.values.docs
        for binding, key in sorted({(e.binding, e.key) for e in mine}):
            self.compare(binding, key, view[binding].get(key), loaded.get((binding, key)), "a Load")

    def compare(self, binding: int, key: tuple, want: Optional[dict], got: Any, how: str) -> bool:
        where = f"{NAMES[binding]} key {show(list(key), 60)}"
        if want is None:
            return self.rec.check(
                "round-trip",
                got is None
                or any(
                    d is not None and first_difference(d, got) is None for d in self.attempted.get((binding, key), ())
                ),
                lambda: f"{how} of {where} returned {show(got)}, which was never stored",
            )
        if got is None:
            return self.rec.check(
                "round-trip",
                None in self.attempted.get((binding, key), ()),
                lambda: f"{how} of {where} found nothing; stored {show(want)}",
                self.key_hint(key),
            )
        diff = first_difference(want, got)
        if diff is None or any(first_difference(d, got) is None for d in self.attempted.get((binding, key), ())):
            return self.rec.check("round-trip", True)
        self.rec.fail("round-trip", f"{how} of {where}: {diff[0]}", diff[1])
        return False

    def key_hint(self, key: tuple) -> Optional[str]:
        text = key[0] if key and isinstance(key[0], str) else ""
        if len(text.encode()) > 255:
            return (
                f"the key is {len(text.encode())} bytes: store keys whole (a VARCHAR(255) or a prefix index cuts "
                "them), or declare max_key_bytes in the driver's limits so that longer keys are refused"
            )
        return None

    def check_views(self, repeated_ack: bool = False) -> None:
        driver = self.factory()
        try:
            self.tracker("dump() of the value bindings")
            dumps = {b: driver.dump(self.materialization, self.bindings[b]) for b in (VALUES, PAIRS)}
        finally:
            driver.close()
        for binding, dumped in dumps.items():
            if not isinstance(dumped, dict):
                self.rec.fail("protocol", f"dump() of a standard binding must return {{key: doc}}, got {dumped!r}")
                continue
            got = {tuple(k) if isinstance(k, (list, tuple)) else (k,): d for k, d in dumped.items()}
            want = self.values.docs[binding]
            for key in sorted(set(want) | set(got), key=repr):
                self.compare(binding, key, want.get(key), got.get(key), "the dump")

    def check_keys_exact(self, confusable: list[str]) -> None:
        """Each of ``confusable`` (stored in ``values`` and, with one integer, in ``pairs``) holds its own document."""
        driver = self.factory()
        try:
            dumps = {b: driver.dump(self.materialization, self.bindings[b]) for b in (VALUES, PAIRS)}
        finally:
            driver.close()
        for binding, dumped in dumps.items():
            if not isinstance(dumped, dict):
                continue  # check_views reports it
            got = {tuple(k) if isinstance(k, (list, tuple)) else (k,): d for k, d in dumped.items()}
            want = self.values.docs[binding]
            for key, doc in want.items():
                kept = got.get(key)
                self.rec.check(
                    "keys-exact",
                    isinstance(kept, dict) and kept.get("n") == doc.get("n"),
                    lambda key=key, kept=kept, doc=doc, binding=binding: (
                        f"{NAMES[binding]} key {show(list(key), 60)} ({len(key[0].encode())} bytes) "
                        + ("is missing from the view" if kept is None else f"holds n={show(kept.get('n'))}")
                        + f", expected n={doc['n']}: keys that agree on a long prefix, or differ only in case "
                        "or normalization, each keep their own document"
                    ),
                    self.key_hint(key),
                )


def _run(kit: ValuesRuntime, batch: int, events: list[Put], crash: Optional[tuple[str, int]] = None) -> None:
    try:
        kit.run_batch(batch, cast(list, events), crash=crash)
    except KitCrash:
        kit.restart()
        kit.run_batch(batch, cast(list, events))


def values(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    vk = _values_runtime(kit)
    limits = vk.limits
    first = value_documents(draw, limits, 0)
    vk.set_layout(2)
    _run(vk, 0, first)
    second = value_documents(draw, limits, 1)
    gone = [Put(p.binding, p.key, None) for p in first[::5]]
    _run(vk, 1, [p for p in second if p.key not in {g.key for g in gone}] + gone, crash=("start_commit", 1))
    # batch 2 Loads every key again (each answer compared), replacing some documents by older ones
    third = [Put(p.binding, p.key, p.doc) for p in first[1::3] if p.doc is not None]
    _run(vk, 2, third + [p for p in second[::7] if p.key not in {t.key for t in third}])
    vk.check_views()
    check_limits(vk, 3)


def key_collisions(kit: KitRuntime, draw: random.Random, quick: bool) -> None:
    vk = _values_runtime(kit)
    keys = collision_keys(vk.limits)
    vk.set_layout(2)
    for b in range(2):
        events = [Put(VALUES, (k,), {"k": k, "n": b * 1000 + i}) for i, k in enumerate(keys)]
        events += [Put(PAIRS, (k, 7), {"k": k, "j": 7, "n": b * 1000 + i}) for i, k in enumerate(keys)]
        _run(vk, b, events)
    vk.check_keys_exact(keys)
    vk.check_views()


def _values_runtime(kit: KitRuntime) -> ValuesRuntime:
    if not isinstance(kit, ValuesRuntime):
        raise TypeError("the value scenarios run on a ValuesRuntime (scenario.runtime)")
    return kit


def over_limits(limits: ValueLimits) -> list[tuple[str, Put]]:
    """Documents just beyond each limit the driver declares: (the limit, the document)."""
    out: list[tuple[str, Put]] = []
    if limits.max_key_bytes is not None:
        k = key_of("over-", limits.max_key_bytes + 1)
        out.append((f"max_key_bytes={limits.max_key_bytes}", Put(VALUES, (k,), {"k": k})))
    if limits.max_key_characters is not None:
        k = "over-" + "x" * (limits.max_key_characters - 4)
        out.append((f"max_key_characters={limits.max_key_characters}", Put(VALUES, (k,), {"k": k})))
    if limits.max_document_bytes is not None:
        doc = {"k": "over-size", "v": ""}
        doc["v"] = "x" * (limits.max_document_bytes + 1 - size_of(doc))
        out.append((f"max_document_bytes={limits.max_document_bytes}", Put(VALUES, ("over-size",), doc)))
    if limits.max_depth is not None:
        doc = {"k": "over-depth", "v": nested(limits.max_depth)}
        out.append((f"max_depth={limits.max_depth}", Put(VALUES, ("over-depth",), doc)))
    if not limits.nul_in_strings:
        out.append(("nul_in_strings=False", Put(VALUES, ("over-nul",), {"k": "over-nul", "s": "a\x00b"})))
    return out


def check_limits(kit: ValuesRuntime, batch: int) -> None:
    """Each document beyond a declared limit, sent in a batch of its own with another
    document: the batch is refused with an error naming the key, and the view is unchanged."""
    kit.set_layout(1)  # one session: a refusal leaves nothing of the batch committed
    for limit, put in over_limits(kit.limits):
        fine = Put(VALUES, ("beside-the-refused",), {"k": "beside-the-refused", "batch": batch})
        try:
            kit.run_batch(batch, cast(list, [fine, put]))
        except KitCrash:  # the runtime died: not a refusal
            raise
        except Exception as exc:  # noqa: BLE001 - the refusal is what is checked
            kit.rec.check(
                "limits",
                str(put.key[0])[:40] in str(exc),
                lambda exc=exc, limit=limit, put=put: (
                    f"a value beyond {limit} was refused, but the error does not name its key: {exc}"
                ),
            )
            for shard in list(kit.live):
                kit.drop(shard)
            kit.restart()
            kit.check_views()
            continue
        kit.rec.fail(
            "limits",
            f"a value beyond the declared {limit} ({put.where}) was committed: the driver declares it "
            "cannot hold it, so it must refuse the batch",
            "refuse, before anything commits, a value beyond a limit you declare (an error naming the key)",
        )
        kit.check_views()
        batch += 1


#: the scenarios of this module, and the runtime they run on
SCENARIOS: dict[str, tuple[Callable[[KitRuntime, random.Random, bool], None], type[KitRuntime]]] = {
    "values": (values, ValuesRuntime),
    "key-collisions": (key_collisions, ValuesRuntime),
}

__all__ = ["values", "key_collisions", "value_bindings", "ValuesRuntime", "SCENARIOS"]
