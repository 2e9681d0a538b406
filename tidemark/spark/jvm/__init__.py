"""A JVM function that proves a document plain in one pass (``PlainDocument.java``).

The compiled combine must prove, for every document, that ``from_json`` forgave nothing in
it (see :func:`tidemark.spark.suspects.plain_document`).  Written as Spark expressions that
proof costs two splits of the text and a few checks per string field: about 2.3 s of CPU per
million documents, a fifth of the whole combine.  ``PlainDocument`` scans the text once
instead (about a fifth of that cost).

The classes ship with the package, compiled when the package is made
(``tidemark-jvm.jar``, built by ``python -m tidemark.spark.jvm`` against PySpark's jars with
``javac --release 17``; a test fails when the jar is older than its sources): nothing is
compiled on a user's machine, and a JRE is enough.  The jar's manifest names the Spark
version it was built against; it is used where the session's Spark has the same major and
minor version (the internals ``PlanRebind`` touches change between them) and
``TIDEMARK_JVM_CHECKS`` is not ``0``.  Anywhere else the combine uses the expression form of
the same proof and the one-job plan is not reused: results never depend on it, only speed.
The jar is added to the session (``ADD JAR``, so executors fetch it too) and registered as a
function.

The same jar holds ``PlanRebind`` (:class:`tidemark.spark.one_job.OneJobPlan` reuses one
batch's analyzed plan for the next batches of a query with it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path
from typing import Optional

from tidemark.options import java_home, process_options

log = logging.getLogger(__name__)

FUNCTION = "tidemark_plain_document"
CLASS = "tidemark.jvm.PlainDocument"
SOURCE = Path(__file__).with_name("PlainDocument.java")
UNDECLARED_FUNCTION = "tidemark_undeclared_members"
UNDECLARED_CLASS = "tidemark.jvm.UndeclaredMembers"
SOURCES = (  # PlanRebind: see tidemark.spark.route
    SOURCE,
    Path(__file__).with_name("UndeclaredMembers.java"),
    Path(__file__).with_name("PlanRebind.java"),
    Path(__file__).with_name("Settled.java"),
)
REBIND_CLASS = "tidemark.jvm.PlanRebind"
_SEPARATOR = "\u0001"
_MEMBERS = "\u0002"  # between an object's name and its members' entries
_MEMBER = "\u0003"  # between an object's members' entries
_OPEN = "\u0004"  # leads the spec of a root (or an object picked whole) that may hold undeclared properties
_CARRIED = "\u0005"  # leads the members' spec of a merged object whose undeclared members are carried
_NESTED = "\u0006"  # between the entries of a carried member's own declared members
#: between the entries of a merged object member's members, by its depth below its top-level
#: object (1: as a carried member's; ``MAX_NESTING`` of ``tidemark.collection.members`` levels)
_DEPTHS = ("\u0006", "\u0007")

_lock = threading.Lock()
_jar: dict[str, Optional[str]] = {}  # Spark version -> jar path, or None when it cannot be built
_warned = False


def enabled() -> bool:
    return process_options().jvm_checks


def spec(plan) -> Optional[str]:
    """The field description ``PlainDocument`` reads, or None if a name cannot be encoded."""
    from tidemark.collection.formats import is_date_time_field
    from tidemark.collection.members import flat_members
    from tidemark.collection.plan import ordered_by_instant, required_members

    codes = {"string": "s", "integer": "i", "number": "n", "boolean": "b", "object": "o", "array": "a"}
    kinds = {"scalar": "s", "raw": "r", "append": "a", "map": "m", "object": "o"}
    bounded = ordered_by_instant(plan)
    entries = []
    if len(plan.fields) >= 2**COUNT_BITS or len(nullable_fields(plan)) > MAX_NULLABLE:
        return None
    for f in plan.fields:
        if _SEPARATOR in f.name or f.kind not in kinds or f.type not in codes:
            return None
        code = codes[f.type]
        if is_date_time_field(f):  # proved a date-time by the scan (``D``: its fraction bounded too)
            code = "D" if f.name in bounded else "d"
        if _MEMBERS in f.name:
            return None
        if f.members or f.carried:  # an object of members (or an array of such objects): their entries after the name
            # every name the spec writes: the members (and theirs, where merged), the carried ones and theirs
            carried = [part for member in f.carried for part in (member, *member.members)]
            names = [part.member for part in (*flat_members(f), *carried)]
            marks = (_SEPARATOR, _MEMBERS, _MEMBER, _NESTED, _OPEN, *_DEPTHS)
            if any(mark in name for name in names for mark in marks):
                return None
            required = required_members(f)  # ``q``: a member the object must hold
            inner = _MEMBER.join(
                [
                    ("q" if m.member in required else "s") + _member_code(m, codes) + m.member + _typed_nested(m, codes)
                    for m in f.members
                ]
                # ``c`` (``k``: required): carried, given back as written (its type is the scan's code)
                + [("k" if m.member in required else "c") + m.type + m.member + _nested(m) for m in f.carried]
            )
            if f.kind == "raw" and _open_items(f):  # picked whole: its undeclared members are kept as written
                inner = _OPEN + inner
            elif carries_members(f):  # merged: its undeclared members are given back, and carried
                inner = _CARRIED + inner
            entries.append(("la" if f.type == "array" else "oo") + f.name + _MEMBERS + inner)
            continue
        if f.nullable:  # null, else its kind: a scalar ``z``, a raw object or array ``R``, an array of scalars ``A``
            kind = "z" if f.kind == "scalar" else kinds[f.kind].upper()
        else:
            kind = kinds[f.kind]
        entries.append(kind + code + f.name)
    return (_OPEN if carries_undeclared(plan) else "") + _SEPARATOR.join(entries)


def _nested(carried) -> str:
    """The declared members of a carried object (an array of objects) ``carried``: U+0002, then
    their entries separated by U+0006 (U+0004 first where undeclared ones are kept as written)."""
    if not carried.members:
        return ""
    codes = {"string": "s", "integer": "i", "number": "n", "boolean": "b"}
    node = carried.schema["items"] if carried.type == "L" else carried.schema  # the object's schema
    required = set(node.get("required", ()))
    entries = _NESTED.join(
        ("q" if part.member in required else "s") + ("d" if is_date_time(part) else codes[part.type]) + part.member
        for part in carried.members
    )
    return _MEMBERS + (_OPEN if node.get("additionalProperties", True) is True else "") + entries


def _typed_nested(member, codes: dict, depth: int = 1) -> str:
    """The members of a merged object member (type ``M``) ``depth`` levels below its top-level
    object: U+0002, then their entries separated by that depth's mark (U+0006, U+0007),
    each followed by its own members where it is such an object (never open: a member it does
    not declare makes the document a suspect)."""
    if member.kind != "object":
        return ""
    required = set(member.schema.get("required", ()))
    return _MEMBERS + _DEPTHS[depth - 1].join(
        ("q" if part.member in required else "s")
        + _member_code(part, codes)
        + part.member
        + _typed_nested(part, codes, depth + 1)
        for part in member.members
    )


def _member_code(member, codes: dict) -> str:
    """The scan's type code of an object's declared member: a date-time ``d``, ``D`` where the
    combine orders it by its instant (maximized, minimized: its fraction bounded too); an array
    of one scalar type (appended or unioned) its items' code in upper case (``S``, ``I``, ``N``,
    ``B``)."""
    if member.kind == "append":
        return codes[member.type].upper()
    if member.kind == "object":  # a merged object: its members follow (:func:`_typed_nested`)
        return "M"
    if not is_date_time(member):
        return codes[member.type]
    return "D" if member.strategy in ("maximize", "minimize") else "d"


def is_date_time(member) -> bool:
    """A member the scan proves an RFC 3339 date-time (``d``): a string of ``format: date-time``."""
    return member.type == "string" and member.schema.get("format") == "date-time"


def _open_items(f) -> bool:
    """Whether the objects of ``f`` (an object, or an array's object items) may hold members
    their schema does not declare (``additionalProperties`` absent or true)."""
    node = f.schema.get("items", {}) if f.type == "array" else f.schema
    return node.get("additionalProperties", True) is True


def carries_undeclared(plan) -> bool:
    """Whether the scan takes undeclared top-level properties as plain (set :data:`UNDECLARED_BIT`)
    and the combine carries them, each last written: the root of an open schema, merged."""
    return not plan.closed and plan.root_strategy == "merge"


def carries_members(f) -> bool:
    """Whether the scan takes the undeclared members of the merged object ``f`` (an object of
    members, of an open schema) as plain, and the combine carries them, each last written."""
    return f.kind == "object" and f.schema.get("additionalProperties", True) is True


def gives_members(f) -> bool:
    """Whether the scan gives back members of the merged object ``f`` for the combine to carry,
    each last written: undeclared ones (:func:`carries_members`) or declared ones it carries as
    written (``FieldPlan.carried``: nullable, objects and arrays picked whole)."""
    return carries_members(f) or bool(f.carried)


def carries_any(plan) -> bool:
    """Whether the combine carries some undeclared property or member (:func:`undeclared_prefix`)."""
    return carries_undeclared(plan) or (plan.root_strategy == "merge" and any(gives_members(f) for f in plan.fields))


def undeclared_prefix(index: Optional[int]) -> str:
    """How the scan's undeclared entries name their place: the root's start with the name's
    quote, a merged object's (``index`` in the plan's fields) with ``index`` and U+0002."""
    return '"' if index is None else f"{index}\u0002"


# The scan's result (a long): the count of properties it read in the low COUNT_BITS bits, then
# one bit per nullable property (in the plan's order) written ``null``, and UNDECLARED_BIT where the
# document holds undeclared top-level properties; -1 where not plain.
COUNT_BITS = 16
MAX_NULLABLE = 46
UNDECLARED_BIT = 62


def nullable_fields(plan) -> list[str]:
    """The plan's nullable properties, in the order of their bits in the scan's result."""
    return [f.name for f in plan.fields if f.nullable]


JAR = Path(__file__).with_name("tidemark-jvm.jar")
SOURCE_DIGEST = "Tidemark-Source-SHA256"
SPARK_VERSION = "Tidemark-Spark-Version"


def source_digest() -> str:
    return hashlib.sha256(b"".join(s.read_bytes() for s in SOURCES)).hexdigest()


def manifest(jar: Path = JAR) -> dict[str, str]:
    """The jar's manifest attributes ({} when there is no readable jar)."""
    try:
        with zipfile.ZipFile(jar) as z:
            text = z.read("META-INF/MANIFEST.MF").decode("utf-8")
    except (OSError, KeyError, zipfile.BadZipFile):
        return {}
    return dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)


def _minor(version: str) -> tuple:
    return tuple(version.split(".")[:2])


def shipped_jar(spark_version: str, jar: Path = JAR) -> Optional[str]:
    """The shipped jar if it was built from these sources against this Spark's major.minor
    version, else None (the expression form is used; said once in the log)."""
    attrs = manifest(jar)
    if not attrs:
        why = f"{jar.name} is missing"
    elif attrs.get(SOURCE_DIGEST) != source_digest():
        why = f"{jar.name} is older than its Java sources"
    elif _minor(attrs.get(SPARK_VERSION, "")) != _minor(spark_version):
        why = f"{jar.name} was built for Spark {attrs.get(SPARK_VERSION)}, this session runs {spark_version}"
    else:
        return str(jar)
    log.info("%s: the compiled combine proves documents plain with Spark expressions", why)
    return None


def _javac() -> Optional[str]:
    home = java_home()
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


def build(dest: Path = JAR) -> Path:
    """Compile the sources against the installed PySpark's jars into ``dest`` (when the package
    is made, by ``python -m tidemark.spark.jvm``; never at run time)."""
    import pyspark

    javac = _javac()
    jars = Path(pyspark.__file__).parent / "jars"
    if javac is None or not jars.is_dir():
        raise SystemExit("building the jar needs a JDK's javac and PySpark's jars")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "classes"
        cmd = [
            javac,
            "--release",
            "17",
            "-nowarn",
            "-encoding",
            "UTF-8",
            "-cp",
            str(jars / "*"),
            "-d",
            str(out),
            *map(str, SOURCES),
        ]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"javac failed:\n{done.stderr or done.stdout}")
        staged = Path(tmp) / dest.name
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(
                zipfile.ZipInfo("META-INF/MANIFEST.MF", date_time=(2020, 1, 1, 0, 0, 0)),
                "Manifest-Version: 1.0\r\nCreated-By: tidemark\r\n"
                f"{SOURCE_DIGEST}: {source_digest()}\r\n{SPARK_VERSION}: {pyspark.__version__}\r\n\r\n",
            )
            for f in sorted(out.rglob("*.class")):
                info = zipfile.ZipInfo(f.relative_to(out).as_posix(), date_time=(2020, 1, 1, 0, 0, 0))
                z.writestr(info, f.read_bytes(), zipfile.ZIP_DEFLATED)
        shutil.copyfile(staged, dest)
    return dest


def available(spark) -> bool:
    """True if ``FUNCTION`` can be called in this session (registering it on first use)."""
    global _warned
    if not enabled():
        return False
    try:
        if spark.catalog.functionExists(FUNCTION):
            return True
        with _lock:
            version = spark.version
            if version not in _jar:
                _jar[version] = shipped_jar(version)
            path = _jar[version]
            if path is None:
                return False
            spark.sql("ADD JAR '" + path.replace("\\", "\\\\").replace("'", "\\'") + "'")
            from pyspark.sql.types import LongType, StringType

            spark.udf.registerJavaFunction(FUNCTION, CLASS, LongType())
            spark.udf.registerJavaFunction(UNDECLARED_FUNCTION, UNDECLARED_CLASS, StringType())
        return True
    except Exception as e:  # noqa: BLE001 - any failure means the expression form, never an error
        if not _warned:
            _warned = True
            log.warning(
                "the JVM plain-document check is unavailable (%s): using Spark expressions",
                str(e).splitlines()[0][:300],
            )
        return False
