"""What the rebuild tests share: an oracle that knows the edited schemas, and the edits."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import yaml

from tests.support.paths import REPO


def rebuild_child(spec: str, faults: str = "") -> subprocess.CompletedProcess:
    """``tidemark rebuild SPEC -m view`` on the plain runner, in a process group of its own
    (a fault point's kill takes it whole), with ``faults`` armed."""
    env = {**os.environ, "TIDEMARK_FAULT_SCOPE": "group"}
    if faults:
        env["TIDEMARK_FAULTS"] = faults
    return subprocess.run(
        [sys.executable, "-m", "tests.support.rebuild_child", spec, "view"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        start_new_session=True,
    )


def oracle(data, *, key="customer", amount="sum", files=None, start=None, after=0) -> dict:
    """key -> document, the files in name order (the first ``files`` only, from the ``after``-th
    on, reduced onto the documents ``start``), lines in order."""
    view: dict = json.loads(json.dumps(start or {}))
    names = sorted(n for n in os.listdir(data) if n.endswith(".json"))[after:files]
    for name in names:
        with open(os.path.join(data, name)) as f:
            for line in f:
                doc = json.loads(line)
                k = doc[key]
                if doc.get("_meta", {}).get("op") == "d":
                    view.pop(k, None)
                    continue
                cur = view.get(k)
                if cur is None:
                    view[k] = json.loads(line)
                    continue
                cur["amount"] = cur["amount"] + doc["amount"] if amount == "sum" else max(cur["amount"], doc["amount"])
                cur["orders"] += doc["orders"]
                cur["largest"] = max(cur["largest"], doc["largest"])
                cur["items"] = cur["items"] + doc["items"]
                cur["flags"] = {**cur["flags"], **doc["flags"]}
                for f_ in ("city", "customer"):
                    cur[f_] = doc[f_]
    return view


def total(view: dict) -> int:
    return sum(d["amount"] for d in view.values())


def edit(spec_path: str, *, amount: str | None = None, key: str | None = None, add: str | None = None) -> None:
    """The spec with ``amount``'s reduce strategy, the key, or a new string property ``add`` changed."""
    obj = yaml.safe_load(open(spec_path))
    coll = obj["collections"]["orders"]
    if add:
        coll["schema"]["properties"][add] = {"type": "string"}
    if amount:
        coll["schema"]["properties"]["amount"]["reduce"]["strategy"] = amount
    if key:
        coll["key"] = [f"/{key}"]
        coll["schema"]["required"] = sorted({*coll["schema"]["required"], key})
    with open(spec_path, "w") as f:
        yaml.safe_dump(obj, f)


def rebuild_while_live_commits(
    spec: str, old: str, data, read_total, *, seed: int, deletes: float = 0.03
) -> tuple[str, list, list]:
    """``Rebuild(spec).run()`` while the live view (spec ``old``) takes one more file during the
    build and a reader polls ``read_total()`` (from a thread of its own); returns what the
    rebuild said, the readings and the names the rebuild ran (plain runner)."""
    import threading

    from tests.support import plain
    from tests.support.helpers import write_orders
    from tidemark.runtime.rebuild import Rebuild
    from tidemark.spec import load_spec

    readings: list = []
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            readings.append(read_total())

    builds: list = []

    def run_view(spec_obj, name):  # the live view takes a new file (old spec) while the shadow builds
        if not builds:
            write_orders(data, files=1, per_file=120, customers=30, seed=seed, start=2, deletes=deletes)
            live = threading.Thread(target=plain.run, args=(old,))
            live.start()
            plain.run(spec_obj, name)
            live.join()
        else:
            plain.run(spec_obj, name)
        builds.append(name)

    poll = threading.Thread(target=reader)
    poll.start()
    try:
        said = Rebuild(load_spec(spec), "view", run_view, say=lambda s: None).run()
    finally:
        stop.set()
        poll.join()
    return said, readings, builds


def assert_whole_readings(readings: list, data, new: dict) -> None:
    """Every reading is the total of a whole old view (after 2 or 3 files) or of the new one."""
    olds = {total(oracle(data, files=n)) for n in (2, 3)}
    assert readings and set(readings) <= olds | {total(new)}, (set(readings), olds, total(new))
