"""The tests import the worker of the tree they are in: the virtualenvs' `.pth` names one checkout's
`worker/`, which is another tree's in a second worktree."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
