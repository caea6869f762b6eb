"""Patches: `ansible.executor.process.worker.WorkerProcess.start`. Knows: ansible-core 2.18 to 2.21
(no version check).

What the playbook process looks up before it forks a task's process, so that each task's process
inherits it instead of looking it up again.

- Jinja2's filter and test plugins: the first template with a filter or test in a process lists
  every filter and test plugin file and wraps each plugin in them. The playbook process itself
  seldom templates with filters, so every task's process made the list again. Now the playbook
  process makes it before each fork (once: Ansible empties it only when plugin paths change, and
  then it is made again).
- The connection and shell plugins: every task's process finds its connection plugin (`local`,
  `ssh`...) and that connection's shell plugin (`sh`) by listing their plugin directories, which
  the playbook process never does. Now it finds, before each fork, the connection named by the
  host's `ansible_connection` or the play, and the shell named by the host's `ansible_shell_type`
  or `sh`, as the task's process will: Ansible keeps what it listed, and the task's process finds
  them there (about 1 ms a task). A name that is a template, or no plugin, or whose lookup fails
  is only looked for: the task's process looks for it itself and reports what fails, as before."""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Makes the playbook process list the Jinja2 filter and test plugins, and find the task's
    connection and shell plugins, before a task's fork."""
    from ansible.executor.process.worker import WorkerProcess

    start = WorkerProcess.start

    def start_with_plugins_found(self: Any) -> Any:
        _list_jinja_plugins()
        _find_connection_plugins(self._task_vars, self._play_context)
        return start(self)

    WorkerProcess.start = start_with_plugins_found  # type: ignore[method-assign]


def _list_jinja_plugins() -> None:
    from ansible.plugins.loader import filter_loader, test_loader

    for loader in (filter_loader, test_loader):
        ensure = getattr(loader, "_ensure_non_collection_wrappers", None)
        if ensure is not None:
            ensure()


def _find_connection_plugins(task_vars: Any, play_context: Any) -> None:
    from ansible.plugins.loader import connection_loader, shell_loader

    shell = task_vars.get("ansible_shell_type")
    lookups = [(shell_loader, shell if isinstance(shell, str) and shell else "sh")]
    for name in {task_vars.get("ansible_connection"), getattr(play_context, "connection", None)}:
        if isinstance(name, str) and name:
            lookups.append((connection_loader, name))
    for loader, name in lookups:
        try:
            loader.find_plugin(name)
        except Exception:  # noqa: BLE001 - the task's process looks for it again and reports what fails
            pass
