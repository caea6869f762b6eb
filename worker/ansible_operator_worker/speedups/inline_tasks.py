"""Patches: `ansible.executor.process.worker.WorkerProcess.start` (and, while a task runs inline,
`ansible.plugins.loader.lookup_loader.get`). Knows: ansible-core 2.18 (`supported()`: its
`TaskExecutor` takes `new_stdin`; other versions: not installed, every task forks).

Tasks that never leave the controller, run in the playbook process of every warm run
(reconciles, finalizers, plans and validations).

Ansible forks a process for every task of every host, even for a task whose action never leaves
the controller: an `assert`, a `fail`, a `debug`, a `set_fact`. On a small virtual machine that
fork is most of such a task's time: the fork itself, the copy-on-write faults of both processes
after it, the result's trip back (about 18 of a task's 25 ms on a two-core test machine). In a warm
run such a task runs in the playbook process, as the forked process would have run it:
Ansible's own `TaskExecutor`, on copies of the task and of its variables (what the fork would
have copied), its result sent on the same queue to the same strategy.

Any other task forks as before:
- another action, or a builtin one whose plugin a playbook or collection shadows;
- a task with a loop, `until`, delegation, `async` or a `timeout` (they run plugins, wait or set
  alarms in the process that runs them);
- a task whose templating calls a lookup plugin: a lookup may open connections or change state
  that every later fork would inherit. It is given up before the lookup runs, its result thrown
  away, and forked.

Module tasks of kubernetes.core and operator_sdk.util run inline too, their module in place
(`modules_in_place`): the task's fork, its copy-on-write faults (the playbook process's too) and
its exit were some 30 ms of a one-task reconcile's CPU. Only where nothing else of the play runs
meanwhile: the play's batch is one host, no task process of the run is alive (so the strategy's
results thread, the one other thread, has nothing to show while the module's output is taken),
the connection is `local` by the host's `ansible_connection` (a template, or another, forks),
there is no `become`, and the action plugin is Ansible's `normal` or one of those collections'. A
lookup its arguments call forks it as above; once its module has started, a lookup (in
`changed_when`, `failed_when`) runs here, as the module must not run twice, and what it changes
in the kubernetes client's process-wide state is put back after the task. A module that ends the
process (`os._exit`, a crash) ends the run, not only its task.

ansible-core 2.18's executor is the one this knows; with another, every task forks."""

from __future__ import annotations

import inspect
import multiprocessing
import os
import traceback
from typing import Any

from .. import kubernetes_state
from . import modules_in_place

#: The builtin actions run inline: none has a connection, runs a module or runs a plugin of its
#: own (`_requires_connection = False` in each).
ACTIONS = frozenset({"assert", "debug", "fail", "set_fact"})

#: The collections whose module tasks run inline, their modules in place, by FQCN prefix.
MODULE_COLLECTIONS = tuple(f"{name}." for name in modules_in_place.COLLECTION_NAMES)

#: While a module task runs inline: whether its module has been started (None: none runs inline).
_MODULE_STARTED: bool | None = None


class _LookupWanted(BaseException):
    """Raised where an inline task would load a lookup plugin: a BaseException, so that no
    `except Exception` in Ansible turns it into the task's result."""


def supported() -> bool:
    """Whether this Ansible's task executor is the one this knows (ansible-core 2.18's)."""
    from ansible.executor.task_executor import TaskExecutor

    return "new_stdin" in inspect.signature(TaskExecutor.__init__).parameters


def install() -> None:
    """In a playbook process: the strategy's workers run eligible tasks inline instead of
    forking."""
    from ansible.executor.process.worker import WorkerProcess

    if not supported():
        return
    start = WorkerProcess.start

    def start_inline_where_possible(self: Any) -> Any:
        task = self._task
        if eligible(task) and run_inline(self):
            return None
        if eligible_module(task) and alone(self._task_vars, self._play_context, task) and run_inline(self, module=True):
            return None
        return start(self)

    WorkerProcess.start = start_inline_where_possible  # type: ignore[method-assign]


def eligible(task: Any) -> bool:
    """Whether `task` may run inline: one of `ACTIONS`, resolved to Ansible's own plugin, with
    nothing that makes it wait, repeat, run elsewhere or run other plugins."""
    return _plain(task) and _builtin_action(task.action, task.collections)


def eligible_module(task: Any) -> bool:
    """Whether `task` may run inline with its module in place: a module of `MODULE_COLLECTIONS`,
    run by Ansible's `normal` action or by an action plugin of those collections, with nothing
    that makes it wait, repeat or run elsewhere, and no `become`."""
    if not _plain(task) or task.become:
        return False
    from ansible.plugins.loader import action_loader, module_loader

    try:
        module = module_loader.find_plugin_with_context(task.action, collection_list=task.collections)
        action = action_loader.find_plugin_with_context(task.action, collection_list=task.collections)
        routed = getattr(module, "action_plugin", None)
        # Neither names an action plugin: Ansible runs the module with `normal`, as a playbook's
        # `action_plugins/` may shadow it (`ansible.legacy`).
        normal = None if action.resolved or routed else action_loader.find_plugin_with_context("ansible.legacy.normal")
    except Exception:  # noqa: BLE001 - the forked task looks for it again and reports what fails
        return False
    for plugin in (action.resolved_fqcn if action.resolved else None, routed):
        if plugin and not str(plugin).startswith(MODULE_COLLECTIONS):
            return False  # another collection's action plugin
    if normal is not None and not _ansible_own(normal, "normal"):
        return False  # a playbook's own `normal`
    return bool(module.resolved) and str(module.resolved_fqcn).startswith(MODULE_COLLECTIONS)


def alone(task_vars: Any, play_context: Any, task: Any) -> bool:
    """Whether a module task may run in this process now: the play's batch is one host, no task
    process is alive, the host's connection is `local` and nothing asks for `become`; and
    Ansible's debug output is off (a task process queues a message after its result)."""
    from ansible import constants

    batch = task_vars.get("ansible_play_batch")
    connection = task_vars.get("ansible_connection") or task.connection or play_context.connection
    return (
        not constants.DEFAULT_DEBUG
        and isinstance(batch, list)
        and len(batch) == 1
        and connection == "local"
        and not task_vars.get("ansible_become")
        and not play_context.become
        and not multiprocessing.active_children()
    )


def module_task_inline() -> bool:
    """A module task runs inline in this process now (its module may run in place)."""
    return _MODULE_STARTED is not None


def module_started() -> None:
    """The module task running inline has started its module: from now on it cannot be given up
    and forked."""
    global _MODULE_STARTED
    if _MODULE_STARTED is False:
        _MODULE_STARTED = True


def _plain(task: Any) -> bool:
    """Nothing makes `task` wait, repeat, run elsewhere or set an alarm."""
    if task.loop is not None or task.loop_with or task.until or task.delegate_to:
        return False
    return not (task.async_val or task.timeout)


def _builtin_action(action: str, collections: Any) -> bool:
    from ansible.plugins.loader import action_loader, module_loader

    name = action.rpartition(".")[2]
    if name not in ACTIONS or action not in (name, f"ansible.builtin.{name}", f"ansible.legacy.{name}"):
        return False
    try:
        found = action_loader.find_plugin_with_context(action, collection_list=collections)
        module = module_loader.find_plugin_with_context(action, collection_list=collections)
    except Exception:  # noqa: BLE001 - the forked task looks for it again and reports what fails
        return False
    if module.resolved and getattr(module, "action_plugin", None):
        return False  # routed to another action plugin
    return _ansible_own(found, name)


def _ansible_own(found: Any, name: str) -> bool:
    """The action plugin `found` is Ansible's own `name`, not one a playbook or collection
    shadows it with."""
    from ansible.plugins import action as builtin_actions

    builtin = os.path.join(os.path.dirname(builtin_actions.__file__), f"{name}.py")
    return bool(found.resolved) and found.plugin_resolved_path == builtin


def run_inline(worker: Any, module: bool = False) -> bool:
    """Runs the worker's task in this process and sends its result as the worker would; False
    when it did not (the task called for a lookup plugin before any module of it started, or could
    not be copied): nothing was sent, and the task is forked. `module`: a module task, whose module
    may run in place."""
    global _MODULE_STARTED
    from ansible.executor.task_executor import TaskExecutor
    from ansible.plugins.loader import lookup_loader

    try:
        task = worker._task.copy()
        task_vars = dict(worker._task_vars)
    except Exception:  # noqa: BLE001 - the forked task meets the same and reports it
        return False
    wanted: list[str] = []
    own = lookup_loader.__dict__.get("get")
    get = lookup_loader.get

    def refuse(name: str, *args: Any, **kwargs: Any) -> Any:
        if _MODULE_STARTED:
            return get(name, *args, **kwargs)
        wanted.append(name)
        raise _LookupWanted()

    lookup_loader.get = refuse  # type: ignore[method-assign]
    stdin = open(os.devnull)  # noqa: SIM115 - what the worker gives a task with no terminal
    _MODULE_STARTED = False if module else None
    try:
        with kubernetes_state.kept():  # what a lookup run here after the module changed
            result: dict[str, Any] = TaskExecutor(
                worker._host,
                task,
                task_vars,
                worker._play_context,
                stdin,
                worker._loader,
                worker._shared_loader_obj,
                worker._final_q,
                worker._variable_manager,
            ).run()
    except _LookupWanted:
        return False
    except Exception:  # noqa: BLE001 - as the worker reports a task that raised
        result = {"failed": True, "exception": traceback.format_exc(), "stdout": ""}
    finally:
        started, _MODULE_STARTED = _MODULE_STARTED, None
        if own is None:
            del lookup_loader.get
        else:
            lookup_loader.get = own  # type: ignore[method-assign]
        stdin.close()
    if wanted and not started:
        return False  # a lookup was wanted and its refusal swallowed on the way
    _send(worker, task, result)
    return True


def _send(worker: Any, task: Any, result: dict[str, Any]) -> None:
    """Puts the result on the strategy's queue, as `WorkerProcess._run` does."""
    try:
        worker._final_q.send_task_result(worker._host.name, task._uuid, result, task_fields=task.dump_attrs())
    except Exception as error:  # noqa: BLE001 - the worker's surrogate for a result it cannot send
        surrogate = {"failed": True, "msg": f"{error}", "exception": traceback.format_exc()}
        worker._final_q.send_task_result(worker._host.name, task._uuid, surrogate, {})
