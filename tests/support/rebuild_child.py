"""``python -m tests.support.rebuild_child SPEC NAME [--abandon]``: ``tidemark rebuild`` on the plain runner.

The rebuild's own code (:mod:`tidemark.runtime.rebuild`) with :func:`tests.support.plain.run`
building the shadow, so that a SIGKILL at a fault point of the build or of the cut-over
costs a Python start-up, not a JVM's.
"""

from __future__ import annotations

import sys

from tests.support import plain
from tidemark.runtime.rebuild import Rebuild
from tidemark.spec import load_spec


def main(argv: list[str]) -> int:
    rebuild = Rebuild(load_spec(argv[0]), argv[1], plain.run, say=print)
    try:
        print(rebuild.abandon() if "--abandon" in argv else rebuild.run())
    finally:
        rebuild.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
