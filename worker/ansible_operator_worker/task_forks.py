"""Ansible forks a process for each task on each host. The first template with a filter or test in
that process lists every filter and test plugin file and wraps each plugin in them. The playbook
process itself seldom templates with filters, so every task's process made the list again. Now the
playbook process makes it before each fork (once: Ansible empties it only when plugin paths
change, and then it is made again), and the task processes inherit it."""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Makes the playbook process list the Jinja2 filter and test plugins before a task's fork."""
    from ansible.executor.process.worker import WorkerProcess
    from ansible.plugins.loader import filter_loader, test_loader

    start = WorkerProcess.start

    def start_with_jinja_plugins(self: Any) -> Any:
        for loader in (filter_loader, test_loader):
            ensure = getattr(loader, "_ensure_non_collection_wrappers", None)
            if ensure is not None:
                ensure()
        return start(self)

    WorkerProcess.start = start_with_jinja_plugins  # type: ignore[method-assign]
