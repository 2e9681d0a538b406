"""Driver-neutral helpers that drive an endpoint driver through the protocol's messages
(a binding, documents, checkpoints, one full transaction), for the drivers' tests."""

from __future__ import annotations

from tidemark.protocol.messages import (
    Acknowledge,
    Apply,
    BindingSpec,
    Field,
    Flush,
    Load,
    Open,
    Range,
    StartCommit,
    Store,
    Validate,
)

MAT = "view"


HALF = 0x7FFFFFFF


def binding(table="customers", *, delta=False, extra=(), key_type="string", key_name="customer", types=None):
    types = dict({"amount": "integer", "score": "number", "vip": "boolean", "tags": "array"}, **(types or {}))
    fields = [Field(key_name, f"/{key_name}", key_type, is_key=True, nullable=False)]
    fields += [Field(n, f"/{n}", t) for n, t in types.items()]
    fields += list(extra)
    return BindingSpec(
        resource={"table": table}, collection="orders", key=(f"/{key_name}",), fields=tuple(fields), delta_updates=delta
    )


def doc(key, amount, *, key_name="customer", **more):
    return {key_name: key, "amount": amount, "score": amount / 2, "vip": amount > 10, "tags": [str(amount)], **more}


def cp(batch, **more):
    return {"checkpoint_id": "chk-1", "batch_id": batch, "materialization": MAT, **more}


def open_session(driver, b, key_range=Range()):
    bindings = b if isinstance(b, tuple) else (b,)
    return driver.open(Open(MAT, "v1", key_range, bindings=bindings))


def store_msg(b: BindingSpec, docs, deletes=None, exists=None, binding_index=0):
    names = [f.name for f in b.value_fields]
    keys = tuple(tuple(d[f.name] for f in b.key_fields) for d in docs)
    return Store(
        binding=binding_index,
        keys=keys,
        values=tuple(tuple(d.get(n) for n in names) for d in docs),
        docs=tuple(docs),
        exists=tuple(exists or [False] * len(docs)),
        deletes=tuple(deletes or [False] * len(docs)),
    )


def load_all(t, binding_index, keys):
    """Load then Flush; {key: doc} of everything answered."""
    out = {}
    for resp in t.load(Load(binding_index, tuple(keys))):
        out.update(zip(resp.keys, resp.docs))
    late, _ = t.flush(Flush())
    for resp in late:
        out.update(zip(resp.keys, resp.docs))
    return out


def txn(t, b, docs, batch, deletes=None, load=True):
    """One full transaction on an open session; returns what Load answered."""
    t.acknowledge(Acknowledge())
    keys = [tuple(d[f.name] for f in b.key_fields) for d in docs]
    loaded = load_all(t, 0, keys) if load and not b.delta_updates else (t.flush(Flush()) and {})
    t.store(store_msg(b, docs, deletes, [k in loaded for k in keys]))
    t.start_commit(StartCommit(cp(batch)))
    return loaded


def apply(driver, *bindings):
    driver.validate(Validate(MAT, driver.config, tuple(bindings)))
    return driver.apply(Apply(MAT, driver.config, tuple(bindings)))
