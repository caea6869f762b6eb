"""What the playbook process prepares before it forks a task's process."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ansible.executor.process.worker import WorkerProcess
from ansible.plugins.loader import connection_loader, filter_loader, shell_loader, test_loader

from ansible_operator_worker.speedups import task_forks


def _fork_seen(monkeypatch: pytest.MonkeyPatch, task_vars: dict[str, Any], connection: str) -> list[Any]:
    """Installs the preparation over a fork that records the loaders' state, and starts one."""
    seen: list[Any] = []

    def fork(self: Any) -> None:
        seen.append(
            {
                "filters": len(filter_loader._cached_non_collection_wrappers),
                "tests": len(test_loader._cached_non_collection_wrappers),
                "connections": set(connection_loader._plugin_path_cache[".py"]),
                "shells": set(shell_loader._plugin_path_cache[".py"]),
            }
        )

    monkeypatch.setattr(WorkerProcess, "start", fork)
    for loader in (filter_loader, test_loader, connection_loader, shell_loader):
        loader._clear_caches()
    task_forks.install()
    WorkerProcess.start(SimpleNamespace(_task_vars=task_vars, _play_context=SimpleNamespace(connection=connection)))  # type: ignore[arg-type]
    return seen


def test_a_task_process_is_forked_with_the_filter_and_test_plugins_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    [state] = _fork_seen(monkeypatch, {}, "ssh")
    assert "to_json" in filter_loader._cached_non_collection_wrappers
    assert "ansible.builtin.match" in test_loader._cached_non_collection_wrappers
    assert state["filters"] > 50 and state["tests"] > 20


def test_a_task_process_is_forked_with_its_connection_and_shell_plugins_found(monkeypatch: pytest.MonkeyPatch) -> None:
    [state] = _fork_seen(monkeypatch, {"ansible_connection": "local"}, "ssh")
    assert {"local", "ssh"} <= state["connections"]
    assert "sh" in state["shells"]


def test_a_connection_that_is_no_plugin_or_a_template_is_left_to_the_task(monkeypatch: pytest.MonkeyPatch) -> None:
    [state] = _fork_seen(monkeypatch, {"ansible_connection": "{{ conn }}", "ansible_shell_type": "nosuchshell"}, "")
    assert "{{ conn }}" not in state["connections"]
    assert "nosuchshell" not in state["shells"]
