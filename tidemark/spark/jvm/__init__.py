"""A JVM function that proves a document plain in one pass (``PlainDocument.java``).

The compiled combine must prove, for every document, that ``from_json`` forgave nothing in
it (see :func:`tidemark.spark.suspects.plain_document`).  Written as Spark expressions that
proof costs two splits of the text and a few checks per string field: about 2.3 s of CPU per
million documents, a fifth of the whole combine.  ``PlainDocument`` scans the text once
instead (about a fifth of that cost).

The Java source ships with the package.  On first use it is compiled with the machine's
``javac`` against PySpark's own jars into a jar under the cache directory (keyed by the
source and the Spark version), added to the session (``ADD JAR``, so executors fetch it
too) and registered as a function.  Where that cannot be done (no JDK, a session that
cannot add jars), or where ``TIDEMARK_JVM_CHECKS=0``, the combine uses the expression form
of the same proof: results never depend on it, only speed.

The same jar holds ``PlanRebind`` (:class:`tidemark.spark.route.OneJobPlan` reuses one
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

log = logging.getLogger(__name__)

FUNCTION = "tidemark_plain_document"
CLASS = "tidemark.jvm.PlainDocument"
SOURCE = Path(__file__).with_name("PlainDocument.java")
SOURCES = (SOURCE, Path(__file__).with_name("PlanRebind.java"))  # PlanRebind: see tidemark.spark.route
REBIND_CLASS = "tidemark.jvm.PlanRebind"
_SEPARATOR = "\u0001"

_lock = threading.Lock()
_jar: dict[str, Optional[str]] = {}  # Spark version -> jar path, or None when it cannot be built
_warned = False


def enabled() -> bool:
    return os.environ.get("TIDEMARK_JVM_CHECKS", "1").strip().lower() not in ("0", "false", "no", "off")


def spec(plan) -> Optional[str]:
    """The field description ``PlainDocument`` reads, or None if a name cannot be encoded."""
    codes = {"string": "s", "integer": "i", "number": "n", "boolean": "b", "object": "o", "array": "a"}
    kinds = {"scalar": "s", "raw": "r", "append": "a", "map": "m"}
    entries = []
    for f in plan.fields:
        if _SEPARATOR in f.name or f.kind not in kinds or f.type not in codes:
            return None
        entries.append(kinds[f.kind] + codes[f.type] + f.name)
    return _SEPARATOR.join(entries)


def _cache_dir() -> Path:
    base = os.environ.get("TIDEMARK_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "tidemark")
    return Path(base) / "jvm"


def _javac() -> Optional[str]:
    home = os.environ.get("JAVA_HOME")
    if home and os.access(os.path.join(home, "bin", "javac"), os.X_OK):
        return os.path.join(home, "bin", "javac")
    return shutil.which("javac")


def build_jar(spark_version: str) -> Optional[str]:
    """The jar for this Spark version (built once per machine), or None if it cannot be built."""
    import pyspark

    source = b"".join(s.read_bytes() for s in SOURCES)
    digest = hashlib.sha256(source + spark_version.encode()).hexdigest()[:16]
    jar = _cache_dir() / digest / "tidemark-jvm.jar"
    if jar.is_file():
        return str(jar)
    javac = _javac()
    jars = Path(pyspark.__file__).parent / "jars"
    if javac is None or not jars.is_dir():
        log.info("no javac or PySpark jars: the compiled combine proves documents plain with Spark expressions")
        return None
    jar.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=jar.parent) as tmp:
        out = Path(tmp) / "classes"
        cmd = [javac, "--release", "17", "-nowarn", "-encoding", "UTF-8", "-cp", str(jars / "*"),
               "-d", str(out), *map(str, SOURCES)]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            log.warning("could not compile %s (%s): using Spark expressions instead", ", ".join(s.name for s in SOURCES),
                        (done.stderr or done.stdout).strip()[-500:])
            return None
        staged = Path(tmp) / "tidemark-jvm.jar"
        with zipfile.ZipFile(staged, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\nCreated-By: tidemark\r\n\r\n")
            for f in sorted(out.rglob("*.class")):
                z.write(f, f.relative_to(out).as_posix())
        os.replace(staged, jar)  # atomic: a concurrent builder's jar is identical
    return str(jar)


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
                _jar[version] = build_jar(version)
            path = _jar[version]
            if path is None:
                return False
            spark.sql("ADD JAR '" + path.replace("\\", "\\\\").replace("'", "\\'") + "'")
            from pyspark.sql.types import IntegerType

            spark.udf.registerJavaFunction(FUNCTION, CLASS, IntegerType())
        return True
    except Exception as e:  # noqa: BLE001 - any failure means the expression form, never an error
        if not _warned:
            _warned = True
            log.warning("the JVM plain-document check is unavailable (%s): using Spark expressions",
                        str(e).splitlines()[0][:300])
        return False
