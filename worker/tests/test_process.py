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


_LOCALE_AS_STARTED = "import os; print(os.environ.get('LC_CTYPE'), end='')"
_LOCALE_AS_FORKED = (
    "import os, sys; from ansible_operator_worker import process; "
    "process.replace_environment(dict(zip(sys.argv[1::2], sys.argv[2::2]))); "
    "process.start_locale(); print(os.environ.get('LC_CTYPE'), end='')"
)


@pytest.mark.parametrize(
    "locale_env",
    [
        {},
        {"LANG": "C"},
        {"LANG": "POSIX"},
        {"LANG": "C.UTF-8"},
        {"LC_ALL": "C"},
        {"LC_CTYPE": "C", "LANG": "C.UTF-8"},
        {"LANG": "xx_YY.UTF-8"},
        {"PYTHONCOERCECLOCALE": "0"},
    ],
)
def test_a_forked_run_gets_the_locale_a_started_interpreter_sets(locale_env: dict[str, str]) -> None:
    """A run the worker forks holds LC_CTYPE as ansible-runner started cold in the same environment
    would (PEP 538), whatever the worker's own environment was: else every run in a C locale
    (a container without LANG) would differ from the worker's and run cold."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path), **locale_env}
    started = subprocess.run([sys.executable, "-c", _LOCALE_AS_STARTED], env=env, capture_output=True, text=True)
    args = [item for pair in env.items() for item in pair]
    worker_env = {**os.environ, "LANG": "C.UTF-8"}
    forked = subprocess.run(
        [sys.executable, "-c", _LOCALE_AS_FORKED, *args], env=worker_env, capture_output=True, text=True
    )
    assert started.returncode == 0 and forked.returncode == 0, started.stderr + forked.stderr
    assert forked.stdout == started.stdout


def test_replacing_the_environment_leaves_exactly_the_new_one_in_python_and_in_c() -> None:
    """What a run's programs inherit (the C environment) is what Python sees: variables removed,
    changed, added and kept alike."""
    script = (
        "import os, subprocess; from ansible_operator_worker import process; "
        "process.replace_environment({'PATH': os.environ['PATH'], 'KEPT': 'same', 'CHANGED': 'new', 'ADDED': 'yes'}); "
        "print(sorted(os.environ.items()) == sorted(dict(line.split('=', 1) for line in "
        "subprocess.run(['env'], capture_output=True, text=True, check=True).stdout.splitlines()).items()), "
        "sorted(name for name in os.environ if name != 'PATH'))"
    )
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONPATH": os.pathsep.join(sys.path),
        "KEPT": "same",
        "CHANGED": "old",
        "REMOVED": "1",
    }
    shown = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "True ['ADDED', 'CHANGED', 'KEPT']", shown.stderr
