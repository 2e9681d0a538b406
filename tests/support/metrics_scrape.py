"""Reading the metrics a running tidemark serves."""

from __future__ import annotations

import re
import urllib.request

SAMPLE = re.compile(r"^([a-z_]+)(\{[^}]*\})? (-?[0-9.e+]+)$")


def scrape(url: str) -> dict:
    """{(name, labels): value} of a Prometheus text page; every line a comment or a sample."""
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            assert re.match(r"^# (HELP|TYPE) tidemark_[a-z_]+ ", line), line
            continue
        m = SAMPLE.match(line)
        assert m, line
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out
