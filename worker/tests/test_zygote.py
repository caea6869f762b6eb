"""The zygote forks each run's process ahead of its run (a spare), serves the run with it, reports
the run's exit, and ends the spare with itself."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zygote_client import Worker, started


def _eventually(check: Any, timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with started(tmp_path_factory.mktemp("worker")) as worker:
        yield worker


def test_a_run_is_served_by_the_process_forked_before_it_and_the_next_one_is_forked(worker: Worker) -> None:
    [spare] = _eventually(worker.spares)
    messages, output = worker.run("run-1", ["--version"])
    started = next(m for m in messages if m["type"] == "started")
    assert started["pid"] == spare
    assert output.strip()  # ansible-runner's version
    # The run tells its exit as it exits, the zygote again once it has reaped it.
    exits = [m for m in messages if m["type"] == "exited"]
    assert exits == [{"type": "exited", "id": "run-1", "code": 0, "signal": None}] * 2
    [next_spare] = _eventually(worker.spares)
    assert next_spare != spare


def test_a_run_asked_for_as_its_spare_dies_is_forked_when_asked(worker: Worker) -> None:
    # Killed at once before the request: the spare is gone, being reaped, or still taking its
    # socket down (its memory goes first) when the request comes, which it then never takes.
    for attempt in range(5):
        [spare] = _eventually(worker.spares)
        os.kill(spare, signal.SIGKILL)
        messages, _ = worker.run(f"run-{attempt}", ["--version"])
        started = next(m for m in messages if m["type"] == "started")
        assert started["pid"] != spare
        assert [m["code"] for m in messages if m["type"] == "exited"] == [0, 0]
    assert len(_eventually(worker.spares)) == 1


def test_the_spare_ends_with_the_worker(tmp_path: Path) -> None:
    worker = Worker(tmp_path)
    [spare] = _eventually(worker.spares)
    worker.close()
    assert _eventually(lambda: _gone(spare))


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie not yet reaped."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True



def test_the_ini_inventory_patterns_compiled_in_the_worker_are_not_compiled_again_by_a_parse() -> None:
    import re

    from ansible.plugins.inventory.ini import InventoryModule

    from ansible_operator_worker import zygote

    re.purge()
    zygote._compile_inventory_patterns()
    compiled = len(re._cache)  # type: ignore[attr-defined]
    assert compiled > 0
    InventoryModule()._compile_patterns()
    assert len(re._cache) == compiled  # type: ignore[attr-defined]
