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


def test_pyspark_is_imported_only_inside_tidemark_spark():
    outside = [p for p in _modules(ROOT) if ROOT / "spark" not in p.parents]
    bad = _violations(outside, "pyspark")
    assert not bad, "\n".join(bad)
