"""The package's layers, checked on its source: every import statement (also those inside
functions and ``if TYPE_CHECKING`` blocks) of every module under ``tidemark/``."""

from __future__ import annotations

import ast
from pathlib import Path

import tidemark

ROOT = Path(tidemark.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, module) of each import in ``path``; relative imports resolved; for
    ``from X import name`` both ``X`` and ``X.name`` (which may be a module)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            out.append((node.lineno, module))
            # ``from tidemark import spark`` imports the subpackage
            out += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return out


def _modules(under: Path):
    return sorted(p for p in under.rglob("*.py") if "__pycache__" not in p.parts)


def _is(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_walk_sees_imports_inside_functions():
    assert any(_is(m, "tidemark.collection.plan") for _, m in imported_modules(ROOT / "collection" / "fast.py"))
    assert any(_is(m, "pyspark") for _, m in imported_modules(ROOT / "spark" / "compile.py"))  # inside functions


CLI = ("tidemark.cli", "tidemark.cli_common", "tidemark.cli_spark")  # the command line's modules


def _violations(paths, *forbidden: str) -> list[str]:
    found = {}
    for p in paths:
        for line, m in imported_modules(p):
            if any(_is(m, f) for f in forbidden):
                found.setdefault(f"{p.relative_to(ROOT.parent)}:{line}", m)
    return [f"{where} imports {m}" for where, m in sorted(found.items())]


def test_collection_imports_neither_drivers_nor_spark():
    bad = _violations(_modules(ROOT / "collection"), "tidemark.drivers", "tidemark.spark")
    assert not bad, "\n".join(bad)


def test_sources_do_not_import_spark():
    bad = _violations(_modules(ROOT / "sources"), "tidemark.spark")
    assert not bad, "\n".join(bad)


def test_pyspark_is_imported_only_inside_tidemark_spark():
    outside = [p for p in _modules(ROOT) if ROOT / "spark" not in p.parents]
    bad = _violations(outside, "pyspark")
    assert not bad, "\n".join(bad)


PRIVATE_HANDLES = {"_jdf", "_jc", "_jvm", "_jsparkSession", "_jsc", "_gateway", "_to_seq", "_to_java_column"}


def test_pyspark_private_handles_are_used_only_in_spark_internals():
    """py4j handles and PySpark's private helpers change between Spark releases: one module
    uses them, behind its version guard (``tidemark/spark/internals.py``)."""
    found = []
    for p in _modules(ROOT):
        if p == ROOT / "spark" / "internals.py":
            continue
        tree = ast.parse(p.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else None
            if isinstance(node, ast.ImportFrom):
                if _is(node.module or "", "pyspark.sql.classic"):
                    name = node.module
                else:
                    name = next((a.name for a in node.names if a.name in PRIVATE_HANDLES), None)
            if name in PRIVATE_HANDLES or (name or "").startswith("pyspark.sql.classic"):
                found.append(f"{p.relative_to(ROOT.parent)}:{node.lineno}: {name}")
    assert not found, "\n".join(found)


# ----------------------------------------------------------------- the package's layers
# (docs/dev/package-map.md says why each rule holds)

LIBRARIES = (
    "tidemark.collection",
    "tidemark.store",
    "tidemark.protocol",
    "tidemark.policy",
    "tidemark.errors",
    "tidemark.jsontext",
    "tidemark.faults",
    "tidemark.files",
)
SQL_ENDPOINTS = ("postgres", "mysql", "sqlite")
LAKE_ENDPOINTS = ("delta", "iceberg")  # the staged-files base: drivers/lake
PUSH_ENDPOINTS = ("kafka", "nats", "webhook")  # their Loads are answered by the local store endpoint
SHARED = ("base", "registry", "common")


def _endpoint_folders() -> list[str]:
    return sorted(
        p.name
        for p in (ROOT / "drivers").iterdir()
        if p.is_dir() and (p / "__init__.py").exists() and p.name not in SHARED
    )


def test_libraries_import_no_driver_runtime_or_spark():
    paths = [
        p
        for lib in LIBRARIES
        for p in (
            _modules(ROOT / lib.split(".")[1])
            if (ROOT / lib.split(".")[1]).is_dir()
            else [ROOT / f"{lib.split('.')[1]}.py"]
        )
    ]
    bad = _violations(paths, "tidemark.drivers", "tidemark.runtime", "tidemark.spark", *CLI, "tidemark.spec")
    assert not bad, "\n".join(bad)


def test_drivers_import_neither_the_runtime_nor_spark():
    bad = _violations(_modules(ROOT / "drivers"), "tidemark.runtime", "tidemark.spark", *CLI)
    assert not bad, "\n".join(bad)


def test_every_endpoint_is_one_folder_and_imports_only_what_it_may():
    """An endpoint folder imports the contract and the shared pieces; the SQL skeleton only
    from SQL endpoints; the staged-files base only from the lake endpoints; the push base only
    from the push endpoints (the local store endpoint only from the push base, its
    ``local.py``); no other endpoint."""
    folders = _endpoint_folders()
    assert {
        "sqlite",
        "postgres",
        "mysql",
        "delta",
        "store",
        "kafka",
        "nats",
        "redis",
        "webhook",
        "command",
        "push",
        "lake",
    } <= set(folders)
    stray = sorted(
        p.name
        for p in (ROOT / "drivers").glob("*.py")
        if p.stem not in ("__init__", "base", "limits", "registry", "memory")
    )
    assert not stray, f"endpoint modules outside a folder of their own: {stray}"
    bad = []
    for name in folders:
        allowed = set(SHARED) | {name}
        if name in SQL_ENDPOINTS:
            allowed.add("sql")
        if name in PUSH_ENDPOINTS:
            allowed.add("push")  # the push base (and through it, drivers/push/local.py, the local store)
        if name == "push":
            allowed.add("store")
        if name in LAKE_ENDPOINTS:
            allowed.add("lake")
        others = [f"tidemark.drivers.{o}" for o in folders + ["sql", "lake", "memory"] if o not in allowed]
        bad += _violations(_modules(ROOT / "drivers" / name), *others)
    assert not bad, "\n".join(bad)


def test_the_shared_pieces_import_no_endpoint():
    endpoints = [f"tidemark.drivers.{o}" for o in _endpoint_folders() + ["memory"]]
    contract = [ROOT / "drivers" / "base.py", ROOT / "drivers" / "limits.py"]
    bad = _violations(_modules(ROOT / "drivers" / "common") + contract, *endpoints)
    assert not bad, "\n".join(bad)


def _graph() -> dict[str, set[str]]:
    mods = {_module_name(p): p for p in _modules(ROOT)}
    graph = {}
    for name, p in mods.items():
        found = [m for _, m in imported_modules(p)]
        deps = set()
        for m in found:
            if m in mods and any(f.startswith(m + ".") and f in mods for f in found):
                continue  # ``from pkg import submodule``: the edge is to the submodule
            while m and m not in mods:
                m = m.rpartition(".")[0]
            if m and m != name and not name.startswith(m + "."):  # a module's own packages run first anyway
                deps.add(m)
        graph[name] = deps
    return graph


def test_no_import_cycles_lazy_and_type_checking_imports_included():
    graph = _graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_the_environment_is_read_only_in_options():
    """Every knob and override read from the environment is declared in ``tidemark/options.py``
    (and the endpoints' settings); elsewhere the package only sets variables for the
    processes it starts."""
    import re

    writes = re.compile(r"os\.environ\[[^\]]+\]\s*=[^=]|os\.environ\.setdefault\(")
    bad = []
    for p in _modules(ROOT):
        if p.name == "options.py" and p.parent == ROOT:
            continue
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if ("os.environ" in line or "getenv(" in line) and not writes.search(line):
                bad.append(f"{p.relative_to(ROOT.parent)}:{n}: {line.strip()}")
    assert not bad, "\n".join(bad)


def test_no_test_module_imports_another():
    """What tests share lives in ``tests/support/``: a test module imported by another would
    also run its fixtures' and tests' module-level code there."""
    tests = ROOT.parent / "tests"
    found = []
    for p in _modules(tests):
        tree = ast.parse(p.read_text(encoding="utf-8"), filename=str(p))
        for node in ast.walk(tree):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n.startswith("tests.") and n.rpartition(".")[2].startswith("test_") for n in names):
                found.append(f"{p.relative_to(tests.parent)}:{node.lineno} imports {names}")
    assert not found, found
