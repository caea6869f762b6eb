"""What the playbook process prepares before it forks a task's process."""

from __future__ import annotations

from typing import Any

import pytest
from ansible.executor.process.worker import WorkerProcess
from ansible.plugins.loader import filter_loader, test_loader

from ansible_operator_worker import task_forks


def test_a_task_process_is_forked_with_the_filter_and_test_plugins_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []

    def fork(self: Any) -> None:
        seen.append((len(filter_loader._cached_non_collection_wrappers), len(test_loader._cached_non_collection_wrappers)))

    monkeypatch.setattr(WorkerProcess, "start", fork)
    for loader in (filter_loader, test_loader):
        loader._clear_caches()
    task_forks.install()
    WorkerProcess.start(object())  # type: ignore[arg-type]
    [(filters, tests)] = seen
    assert "to_json" in filter_loader._cached_non_collection_wrappers
    assert "ansible.builtin.match" in test_loader._cached_non_collection_wrappers
    assert filters > 50 and tests > 20
