"""No module of tidemark over 620 lines (``LIMIT``): a module that grows past it is split by what it does."""

from __future__ import annotations

from pathlib import Path

from tests.support.paths import REPO, SUPPORT

LIMIT = 620  # lines as `ruff format` writes them (the test's name says this number: change both together)
ROOT = Path(REPO) / "tidemark"


def test_no_module_is_over_620_lines():
    big = {
        str(p.relative_to(ROOT)): n
        for p in ROOT.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    assert not big, f"modules over {LIMIT} lines: {big}"
