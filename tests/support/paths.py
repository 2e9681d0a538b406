"""Where things are, for tests wherever they sit in the tree."""

from __future__ import annotations

import os

SUPPORT = os.path.dirname(os.path.abspath(__file__))  # this folder: helpers and child processes
REPO = os.path.dirname(os.path.dirname(SUPPORT))  # the repository
