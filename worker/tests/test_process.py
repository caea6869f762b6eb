"""A run's standard streams are made as CPython makes them at start-up, from the run's environment."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SHOW = (
    "import sys; from ansible_operator_worker import process; process.standard_streams(); "
    "print(type(sys.stdout.buffer).__name__, end='')"
)


@pytest.mark.parametrize(("unbuffered", "expected"), [(None, "BufferedWriter"), ("1", "FileIO")])
def test_stdout_is_buffered_unless_the_environment_sets_pythonunbuffered(unbuffered: str | None, expected: str) -> None:
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    if unbuffered is not None:
        env["PYTHONUNBUFFERED"] = unbuffered
    shown = subprocess.run([sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout == expected, shown.stderr
