"""The type check reads every module: no per-module ``ignore_errors`` in ``pyproject.toml``,
and no ``# type: ignore`` beyond the ones listed here with their reasons."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# file -> why its ignore stays (a new one fails here: fix the types instead, or add it with a reason)
ALLOWED = {
    "tidemark/drivers/iceberg/tables.py": "stand-in error classes when SQLAlchemy is not installed",
    "tidemark/drivers/nats/wire.py": "a JSON value read back from the stream, checked by the constructor",
}


def test_mypy_checks_every_module():
    text = (ROOT / "pyproject.toml").read_text()
    assert "ignore_errors" not in text.replace("no per-module ignore_errors", "")
    assert "[[tool.mypy.overrides]]" not in text


def test_no_new_type_ignores():
    found = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tidemark").rglob("*.py")
        if re.search(r"#\s*type:\s*ignore", p.read_text(encoding="utf-8"))
    }
    assert found <= set(ALLOWED), f"new `# type: ignore` in {sorted(found - set(ALLOWED))}"
