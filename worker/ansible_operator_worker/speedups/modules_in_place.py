"""Patches: nothing of Ansible's; `modules` asks it before it forks a module process. Knows:
ansible-core 2.18 to 2.21 (the module's name is read from its AnsiballZ wrapper: `mod_name=` in
2.18, `module_fqn=` from 2.19).

A kubernetes.core or operator_sdk.util module runs in the task's own process, not in a fork of it:
the fork, its copy-on-write faults and its exit were half of a module process's CPU (some 25 ms of
a `k8s` task's 50 on a two-core machine). The task's process is a fork Ansible makes for this one
task (a `WorkerProcess`) and ends after it, so what the module leaves behind there is seen by no
later task. Or it is the playbook process, where `inline_tasks` runs the task itself: there what
the module changes is put back as below, its exit handlers run at its end and the process's own
are kept.

The module runs as in the module process `modules` forks: descriptors 0, 1 and 2 are `/dev/null`
and two in-memory files, Ansible's own modules are set aside in `sys.modules` (the module imports
them from its payload), the environment has the command line's variables, signal handlers are
the defaults of a new interpreter, so is the kubernetes client's process-wide state
(`kubernetes_state`), and its `atexit` handlers run at its end. Everything the task's process had
before is put back after: descriptors, standard streams, `sys.modules`, the import system,
`sys.argv`, the environment, the working directory, the umask, signal handlers, warning filters,
the locale (an AnsibleModule sets it from its environment), the kubernetes client's state.

Only the plain case runs in place: a pipelined module of those two collections, in the main
thread of a task's `WorkerProcess` that runs no other thread, or of the playbook process running
the task inline whose one other thread is the strategy's results thread (one that wrote to the
descriptors meanwhile would write into the module's output; `inline_tasks` sees that the results
thread has nothing to show), with descriptors 0 to 2 open and no timer armed (a task's `timeout`,
which a module process would not see).
Everything else forks as before. The module_utils the zygote stashed are adopted by the first
module run in place only: that run changes them, so later ones in the same process (a loop's
items) import their payload's own, as a new interpreter does.
"""

from __future__ import annotations

import atexit
import contextlib
import locale
import multiprocessing
import os
import re
import signal
import sys
import threading
import traceback
import warnings
import zipimport
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import kubernetes_state, process
from . import module_utils

#: The collections whose modules run in place (and whose tasks `inline_tasks` may run inline).
COLLECTION_NAMES = ("kubernetes.core", "operator_sdk.util")

#: The modules that run in place, by the prefix of their Python name.
COLLECTIONS = tuple(f"ansible_collections.{name}.plugins.modules." for name in COLLECTION_NAMES)

#: The module's name in its AnsiballZ wrapper, where Ansible's template writes it (2.18: the
#: `runpy.run_module` call after the payload's base64; 2.19 on: the wrapper's arguments, before
#: the module's parameters).
_NAME = re.compile(rb"\b(?:mod_name|module_fqn)='([\w.]+)'")


def module_name(source: bytes) -> str | None:
    """The fully qualified name of the module an AnsiballZ wrapper runs."""
    match = _NAME.search(source)
    return match.group(1).decode() if match else None


def runs_in_place(source: bytes, inline: bool = False) -> bool:
    """The module this pipelined source runs is one to run in this process; `inline`: its task
    runs inline in this playbook process (`inline_tasks`)."""
    name = module_name(source)
    return (
        name is not None
        and name.startswith(COLLECTIONS)
        and threading.current_thread() is threading.main_thread()
        and (_in_task_process() and threading.active_count() == 1 or inline and _results_thread_only_beside())
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0
        and _standard_descriptors_open()
    )


def _results_thread_only_beside() -> bool:
    """The only other thread of this playbook process is the strategy's results thread."""
    from ansible.plugins.strategy import results_thread_main

    others = [thread for thread in threading.enumerate() if thread is not threading.current_thread()]
    return all(getattr(thread, "_target", None) is results_thread_main for thread in others)


def _standard_descriptors_open() -> bool:
    """Descriptors 0, 1 and 2 are open here, to be put back after the module."""
    try:
        for fd in (0, 1, 2):
            os.fstat(fd)
    except OSError:
        return False
    return True


def _in_task_process() -> bool:
    """This process is a fork Ansible made for one task, which ends with it."""
    from ansible.executor.process.worker import WorkerProcess

    return isinstance(multiprocessing.current_process(), WorkerProcess)


def run(become: Callable[[], int]) -> tuple[int, bytes, bytes]:
    """Runs a module here: `become()` (`modules.become_module`) with standard input from
    `/dev/null` and standard output and error into memory, then the exit handlers it registered;
    its exit status, standard output and error, with this process put back as it was."""
    out = os.memfd_create("module-stdout", os.MFD_CLOEXEC)
    err = os.memfd_create("module-stderr", os.MFD_CLOEXEC)
    saved = _State.save()
    status = 1
    try:
        with _exit_handlers_of_its_own():
            null = os.open(os.devnull, os.O_RDONLY)
            process.redirect(null, out, err)
            os.close(null)
            status = process.at_exit(become())
    finally:
        saved.restore()
        module_utils.STASH.clear()
    return status, _read(out), _read(err)


@contextlib.contextmanager
def _exit_handlers_of_its_own() -> Iterator[None]:
    """`atexit` as the module sees it: handlers of its own, which `become` clears, the module
    registers and `process.at_exit` runs (last registered first, an error printed as the
    interpreter does), while this process's own are neither run nor lost."""
    handlers: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def register(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Callable[..., Any]:
        handlers.append((func, args, kwargs))
        return func

    def unregister(func: Callable[..., Any]) -> None:
        handlers[:] = [handler for handler in handlers if handler[0] != func]

    def run_all() -> None:
        while handlers:
            func, args, kwargs = handlers.pop()
            try:
                func(*args, **kwargs)
            except SystemExit:
                pass
            except BaseException:  # noqa: BLE001 - as the interpreter reports it, and goes on
                print(f"Exception ignored in atexit callback: {func!r}", file=sys.stderr)
                traceback.print_exc()

    own = {
        "register": register,
        "unregister": unregister,
        "_clear": handlers.clear,
        "_run_exitfuncs": run_all,
        "_ncallbacks": handlers.__len__,
    }
    saved = {name: getattr(atexit, name) for name in own}
    for name, function in own.items():
        setattr(atexit, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(atexit, name, function)


def _read(fd: int) -> bytes:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _set_aside(name: str) -> bool:
    """A module the module run replaces with its own: Ansible's, a collection's, `__main__`."""
    return name == "__main__" or name.split(".", 1)[0] in ("ansible", "ansible_collections")


@dataclass
class _State:
    """What running a module changes in this process, as it was before."""

    descriptors: list[int]
    streams: tuple[Any, ...]
    argv: list[str]
    lists: list[tuple[list[Any], list[Any]]]
    importer_cache: dict[str, Any]
    modules: dict[str, ModuleType]
    compile_source: Any
    environ: dict[str, str]
    cwd: str
    umask: int
    handlers: dict[int, Any]
    wakeup_fd: int
    warning_filters: list[Any]
    excepthook: Any
    locale: str
    kubernetes: kubernetes_state.State

    @classmethod
    def save(cls) -> _State:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
        umask = os.umask(0o022)
        os.umask(umask)
        return cls(
            descriptors=[os.dup(fd) for fd in (0, 1, 2)],
            streams=(sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__),
            argv=sys.argv,
            lists=[(current, list(current)) for current in (sys.path, sys.meta_path, sys.path_hooks)],
            importer_cache=dict(sys.path_importer_cache),
            modules={name: module for name, module in sys.modules.items() if _set_aside(name)},
            compile_source=zipimport._compile_source,  # type: ignore[attr-defined]
            environ=dict(os.environ),
            cwd=os.getcwd(),
            umask=umask,
            handlers={signum: signal.getsignal(signum) for signum in signal.valid_signals()},
            wakeup_fd=signal.set_wakeup_fd(-1),
            warning_filters=list(warnings.filters),
            excepthook=sys.excepthook,
            locale=locale.setlocale(locale.LC_ALL),
            kubernetes=kubernetes_state.save(),
        )

    def restore(self) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001 - the module's output is what it wrote
                pass
        for target, fd in enumerate(self.descriptors):
            os.dup2(fd, target, inheritable=True)
            os.close(fd)
        sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__ = self.streams
        sys.argv = self.argv
        for current, contents in self.lists:
            current[:] = contents
        sys.path, sys.meta_path, sys.path_hooks = (current for current, _ in self.lists)
        sys.path_importer_cache.clear()
        sys.path_importer_cache.update(self.importer_cache)
        for name in [name for name in sys.modules if _set_aside(name)]:
            del sys.modules[name]
        sys.modules.update(self.modules)
        zipimport._compile_source = self.compile_source  # type: ignore[attr-defined]
        process.replace_environment(self.environ)
        with contextlib.suppress(locale.Error):
            locale.setlocale(locale.LC_ALL, self.locale)
        kubernetes_state.restore(self.kubernetes)
        os.chdir(self.cwd)
        os.umask(self.umask)
        for signum, handler in self.handlers.items():
            if handler is not None and signal.getsignal(signum) is not handler:
                try:
                    signal.signal(signum, handler)
                except (OSError, ValueError):
                    pass
        signal.set_wakeup_fd(self.wakeup_fd)
        warnings.filters[:] = self.warning_filters
        warnings._filters_mutated()  # type: ignore[attr-defined]
        sys.excepthook = self.excepthook
