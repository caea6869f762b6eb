"""The zygote: started once by the operator with the control socket as its standard input, it
imports what every run needs, says it is ready, and forks a run process for each run request.
It reaps them and reports their exit. When the operator goes away (end of file on the control
socket) or asks it to stop (SIGTERM), it ends the runs it started and exits."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.metadata
import os
import platform
import selectors
import shutil
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, NoReturn

from . import ansible_state, kept, playbook, process, protocol, run
from .speedups import (
    collection_loader,
    event_files,
    event_partials,
    jinja_misses,
    lazy_kubernetes,
    module_utils,
    modules,
    parse_cache,
    payload_cache,
    playbook_cli,
    plugin_settings,
    runner_cli,
    template_cache,
)

#: What every run imports, so a run does not: ansible-runner, the Ansible CLI and executor with the
#: plugins every play uses (builtin plugins are found in `sys.modules` by Ansible's plugin loader),
#: and the libraries modules import, the kubernetes client above all. Plugins that read the
#: environment or change global state when imported (ansible-runner's `awx_display` callback) are
#: left to each run.
PRELOAD = (
    "ansible_runner.__main__",
    "ansible_runner.interface",
    "ansible_runner.runner",
    "ansible_runner.config.runner",
    "pexpect",
    "ansible.cli.playbook",
    "ansible.executor.playbook_executor",
    "ansible.executor.task_queue_manager",
    "ansible.executor.task_executor",
    "ansible.executor.process.worker",
    "ansible.executor.module_common",
    "ansible.modules",
    "ansible.playbook.handler_task_include",
    "ansible.playbook.play",
    "ansible.playbook.role",
    "ansible.template",
    "ansible.vars.manager",
    "ansible.inventory.manager",
    "ansible.plugins.action",
    "ansible.plugins.action.normal",
    "ansible.plugins.action.command",
    "ansible.plugins.action.debug",
    "ansible.plugins.action.fail",
    "ansible.plugins.action.set_fact",
    "ansible.plugins.action.assert",
    "ansible.plugins.become.runas",
    "ansible.plugins.become.su",
    "ansible.plugins.become.sudo",
    "ansible.plugins.cache.jsonfile",
    # Every run loads every callback and connection plugin (and reads its documentation).
    "ansible.plugins.callback.default",
    "ansible.plugins.callback.junit",
    "ansible.plugins.callback.minimal",
    "ansible.plugins.callback.oneline",
    "ansible.plugins.callback.tree",
    "ansible.plugins.connection.local",
    "ansible.plugins.connection.paramiko_ssh",
    "ansible.plugins.connection.psrp",
    "ansible.plugins.connection.ssh",
    "ansible.plugins.connection.winrm",
    "ansible.plugins.filter.core",
    "ansible.plugins.filter.mathstuff",
    "ansible.plugins.inventory.host_list",
    "ansible.plugins.inventory.ini",
    "ansible.plugins.inventory.yaml",
    "ansible.plugins.inventory.auto",
    "ansible.plugins.inventory.script",
    "ansible.plugins.inventory.toml",
    "ansible.plugins.lookup.env",
    "ansible.plugins.lookup.file",
    "ansible.plugins.shell.cmd",
    "ansible.plugins.shell.powershell",
    "ansible.plugins.shell.sh",
    "ansible.plugins.strategy.linear",
    "ansible.plugins.test.core",
    "ansible.plugins.vars.host_group_vars",
    "kubernetes",
    "kubernetes.client",
    "kubernetes.config",
    "kubernetes.dynamic",
    "kubernetes.stream",
    "kubernetes.watch",
    "urllib3",
    "requests",
    # What `ansible.module_utils.urls` imports, which every kubernetes.core module imports: a
    # module process imported them again in every run (the email package's header registry alone
    # took some 20 ms), for 0.8 MiB here.
    "email.mime.application",
    "email.mime.multipart",
    "email.mime.nonmultipart",
    "email.parser",
    "email.policy",
    "email.utils",
    "encodings.cp437",
    "gzip",
    "netrc",
    "yaml",
    "jinja2",
    "jsonpatch",
    "json",
    "locale",
    "multiprocessing.popen_fork",
    "selectors",
    "shlex",
    "runpy",
    "zipfile",
)


def main() -> NoReturn:
    """Entry point: `python -m ansible_operator_worker` with the control socket on standard input."""
    process.BASE_SYS_PATH[:] = sys.path[1:]
    control = socket.socket(fileno=os.dup(0))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    started = time.monotonic()
    # A run's playbook process tells its status and exits; its zombie may outlive the run process
    # that would have reaped it, and comes here to be reaped.
    process.become_subreaper()
    _add_runner_environment()
    lazy_kubernetes.install()
    missing = _preload()
    collection_loader.install()
    runner_cli.build()
    event_files.install()
    event_partials.install()
    parse_cache.install()
    _keep_in_memory()
    template_cache.install()
    modules.install_bytecode()
    payload_cache.install()
    jinja_misses.install()
    inputs = ansible_state.worker_inputs()
    playbook_cli.build()
    plugin_settings.install()
    ansible_state.forget_worker_local_tmp()
    worker = playbook.Worker(
        python=sys.executable, env=dict(os.environ), settings=ansible_state.settings(), inputs=inputs
    )
    # Everything imported so far is shared by every fork: keep the collector off those pages.
    gc.collect()
    gc.freeze()
    protocol.send(
        control,
        {
            "type": "ready",
            "pid": os.getpid(),
            "versions": _versions(),
            "preload_seconds": round(time.monotonic() - started, 3),
            "not_preloaded": missing,
        },
    )
    Zygote(control, worker).serve()
    os._exit(0)


def _add_runner_environment() -> None:
    """Adds what ansible-runner adds to every run's environment (its event callback, its cache
    plugin, ...), so the settings Ansible reads at import are those of a run. Per-run paths among
    them are settings read only when used (`ansible_state.RUNTIME_SETTINGS`)."""
    from ansible_runner.config.runner import RunnerConfig

    with tempfile.TemporaryDirectory() as private_data_dir:
        config = RunnerConfig(private_data_dir=private_data_dir, playbook="main.yml", ident="worker")
        config.prepare_env()
        env = dict(config.env)
    for per_run in ("AWX_ISOLATED_DATA_DIR", "ANSIBLE_CACHE_PLUGIN_CONNECTION"):
        env.pop(per_run, None)
    os.environ.update(env)


#: Directories under the runner directory where workers before this one kept compiled code that
#: runs wrote; nothing reads them now.
_FORMER_CACHES = (".templates", ".bytecode", ".ansiballz")


def _keep_in_memory() -> None:
    """What the worker keeps for runs lives in its memory (`kept`), where a run cannot write: no
    process of this user may attach to the worker (ptrace, /proc/<pid>/mem) once it is not
    dumpable, nor to its learners and spares, which inherit that. A run is made dumpable again
    once it has its request (`run.main`). The directories former workers kept code in are
    removed."""
    process.set_dumpable(False)
    for name in _FORMER_CACHES:
        path = os.path.join(os.getcwd(), name)
        if os.path.lexists(path):
            message = f"ansible-operator worker: removing {path}: compiled code is no longer kept on disk"
            print(message, file=sys.stderr, flush=True)
            with contextlib.suppress(OSError):
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)
                else:
                    os.remove(path)


def _preload() -> list[str]:
    missing = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    _preload_jinja_plugins()
    _compile_inventory_patterns()
    return missing


def _preload_jinja_plugins() -> None:
    """Every run's first template loads every builtin filter and test plugin file, each as a module
    named by the hash of its path (several plugins share a file), and wraps each plugin in them
    (some 3 ms a run). Hashes of strings are the same in every fork, so loading them here, as the
    loaders do, leaves each in `sys.modules` under the name a run looks for. The wrappers
    (ansible-core 2.18) are kept too: they are made from the loaders' paths, which are settings, and
    a run whose settings differ from the worker's runs cold; Ansible forgets them itself when a run
    adds a plugin directory (its playbook's, a role's)."""
    from ansible.plugins.loader import filter_loader, test_loader

    for loader in (filter_loader, test_loader):
        ensure = getattr(loader, "_ensure_non_collection_wrappers", None)
        try:
            if ensure is not None:
                ensure()
                continue
            for _ in loader.all(class_only=True):
                pass
            loader._clear_caches()
        except Exception:  # noqa: BLE001 - a run loads them itself, and reports what fails
            loader._clear_caches()


def _compile_inventory_patterns() -> None:
    """The ini inventory plugin (the operator's own inventory is ini) compiles its patterns at each
    parse; compiled here, every run finds them in Python's cache of compiled patterns."""
    try:
        from ansible.plugins.inventory.ini import InventoryModule

        InventoryModule()._compile_patterns()
    except Exception:  # noqa: BLE001 - a run compiles them itself
        pass


def _versions() -> dict[str, str]:
    from ansible.release import __version__ as ansible_core

    return {
        "ansible_core": ansible_core,
        "ansible_runner": importlib.metadata.version("ansible-runner"),
        "python": platform.python_version(),
    }


#: How long reports wait for the runs going to end before a learner takes them anyway: a learner
#: takes CPU from runs, and a run that just started reports again what the one before it did.
LEARN_DELAY = 2.0

#: What a spare answers when it has its run request, and how long the zygote waits for it.
_TAKEN = b"taken"
_HAND_OVER_TIMEOUT = 5.0


@dataclass
class Spare:
    """A run process forked ahead of its run (`run.spare`), waiting for it on `socket`."""

    pid: int
    socket: socket.socket


class Zygote:
    """The serving loop."""

    def __init__(self, control: socket.socket, worker: playbook.Worker) -> None:
        self.control = control
        self.worker = worker
        #: Run processes by pid, with their run id.
        self.runs: dict[int, str] = {}
        #: The next run's process, forked while the worker waits: a run does not wait for its fork.
        self.spare: Spare | None = None
        self.selector = selectors.DefaultSelector()
        self.wakeup_read, self.wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.stopping = False
        #: Where runs report what they made themselves, and the learner at work on them.
        self.reports = kept.open_reports()
        self.learner: kept.Learner | None = None
        #: Reports waiting for a learner, and when they go to one though runs are still going.
        self.waiting: list[bytes] = []
        self.learn_at: float | None = None

    def serve(self) -> None:
        """Serves run requests until the operator goes away or SIGTERM."""
        signal.set_wakeup_fd(self.wakeup_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._stop)
        self.selector.register(self.control, selectors.EVENT_READ)
        self.selector.register(self.wakeup_read, selectors.EVENT_READ)
        self.selector.register(self.reports, selectors.EVENT_READ)
        self.spare = self._fork_spare()
        while not self.stopping:
            deadline = self.learn_at if self.learner is None else self.learner.deadline
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            events = self.selector.select(timeout)
            # Runs first: what a learner brings can wait.
            for key, _ in events:
                if key.fileobj is self.control:
                    self._receive()
                elif key.fileobj is self.wakeup_read:
                    self._drain_wakeups()
            for key, _ in events:
                if key.fileobj is self.reports:
                    kept.receive(self.reports, self.waiting)
                    if self.waiting and self.learn_at is None:
                        self.learn_at = time.monotonic() + LEARN_DELAY
                elif self.learner is not None and key.fileobj == self.learner.results:
                    self._learner_results()
            if self.learner is not None and time.monotonic() >= self.learner.deadline:
                self._end_learner(complete=False)
            self._reap()
            ready = self.learn_at is not None and (not self.runs or time.monotonic() >= self.learn_at)
            if ready and self.learner is None:
                self._start_learner()
        if self.learner is not None:
            self._end_learner(complete=False)
        self._end_runs()

    def _start_learner(self) -> None:
        """Reports wait, and no run is going or they waited `LEARN_DELAY`: a learner takes them."""
        self.learner = kept.start_learner(self.waiting, self._leave_serving)
        if self.learner is None:
            self.learn_at = time.monotonic() + LEARN_DELAY
            return
        self.waiting, self.learn_at = [], None
        self.selector.register(self.learner.results, selectors.EVENT_READ)

    def _learner_results(self) -> None:
        assert self.learner is not None
        if kept.read_results(self.learner):
            self._end_learner(complete=True)

    def _end_learner(self, complete: bool) -> None:
        """Keeps what the learner made (when it is done). What was learnt joins what every fork
        shares (out of the collector's way, as at start), and the spare, forked before, is replaced
        so that the next run has it."""
        assert self.learner is not None
        self.selector.unregister(self.learner.results)
        learnt = kept.finish_learner(self.learner, complete)
        self.learner = None
        if self.waiting and self.learn_at is None:
            self.learn_at = time.monotonic() + LEARN_DELAY
        if learnt:
            try:
                module_utils.stash_kept(modules.compiled)
            except Exception as error:  # noqa: BLE001 - module processes then import as they come
                print(f"ansible-operator worker: module_utils not stashed: {error!r}", file=sys.stderr, flush=True)
            gc.freeze()
            if self.spare is not None:
                self._end_spare()
                self.spare = self._fork_spare()

    def _stop(self, *_: Any) -> None:
        self.stopping = True

    def _receive(self) -> None:
        try:
            received = protocol.receive(self.control)
        except protocol.ProtocolError as error:
            print(f"ansible-operator worker: bad message: {error}", file=sys.stderr, flush=True)
            return
        except OSError:
            received = None
        if received is None:
            self.stopping = True
            return
        message, fds = received
        if message["type"] != "run" or len(fds) != protocol.RUN_FDS:
            for fd in fds:
                os.close(fd)
            print(f"ansible-operator worker: unexpected {message['type']} message", file=sys.stderr, flush=True)
            return
        self._start_run(message, fds)

    def _start_run(self, message: dict[str, Any], fds: list[int]) -> None:
        try:
            request = protocol.run_request(message)
        except protocol.ProtocolError as error:
            for fd in fds:
                os.close(fd)
            protocol.send(self.control, {"type": "spawn_failed", "id": str(message.get("id")), "error": str(error)})
            return
        pid = self._hand_to_spare(message, fds)
        if pid is None:
            try:
                pid = _fork()
            except OSError as error:
                for fd in fds:
                    os.close(fd)
                protocol.send(self.control, {"type": "spawn_failed", "id": request.id, "error": f"fork: {error}"})
                return
            if pid == 0:
                self._leave_serving()
                run.main(request, fds[0], fds[1], self.control.fileno(), self.worker)
        for fd in fds:
            os.close(fd)
        self.runs[pid] = request.id
        protocol.send(self.control, {"type": "started", "id": request.id, "pid": pid})
        if self.spare is None:
            self.spare = self._fork_spare()

    def _hand_to_spare(self, message: dict[str, Any], fds: list[int]) -> int | None:
        """The spare's pid once it has said it took the run request; None when there is no spare,
        or it did not take it (it died before or while it was handed over: its end may be a
        moment after its socket last accepts a message)."""
        spare, self.spare = self.spare, None
        if spare is None:
            return None
        try:
            protocol.send_with_fds(spare.socket, message, fds)
            spare.socket.settimeout(_HAND_OVER_TIMEOUT)
            taken = spare.socket.recv(len(_TAKEN)) == _TAKEN
        except OSError:
            taken = False
        finally:
            spare.socket.close()
        if not taken:
            with contextlib.suppress(OSError):
                os.kill(spare.pid, signal.SIGKILL)
            return None
        return spare.pid

    def _fork_spare(self) -> Spare | None:
        """Forks the next run's process; None when it cannot (runs are then forked when asked)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            pid = _fork()
        except OSError:
            ours.close()
            theirs.close()
            return None
        if pid == 0:
            self._leave_serving()
            ours.close()
            run.spare(lambda: _run_request(theirs), self.control.fileno(), self.worker)
        theirs.close()
        return Spare(pid, ours)

    def _end_spare(self) -> None:
        """Ends the spare: closing its socket ends a spare that waits for its run."""
        assert self.spare is not None
        self.spare.socket.close()
        self.spare = None

    def _leave_serving(self) -> None:
        """In a fork: what only the serving loop uses goes."""
        signal.set_wakeup_fd(-1)
        self.selector.close()
        os.close(self.wakeup_read)
        os.close(self.wakeup_write)
        if self.learner is not None:
            os.close(self.learner.results)
        if self.spare is not None:
            self.spare.socket.close()
        self.waiting.clear()
        kept.leave()

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self.wakeup_read, 4096):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            if self.spare is not None and pid == self.spare.pid:
                # A spare that died unasked: the next run is forked when asked, and makes the
                # next spare.
                self.spare.socket.close()
                self.spare = None
                continue
            run_id = self.runs.pop(pid, None)
            if run_id is None:
                continue
            signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            if signum is not None:
                # A run ended by a signal leaves its play's task processes (the play ran in it) to
                # this subreaper: its process group (`run.prepare`) ends with it, as a playbook
                # process's leftovers end with the run process that outlives it.
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
            try:
                protocol.send(self.control, {"type": "exited", "id": run_id, "code": code, "signal": signum})
            except OSError:
                self.stopping = True

    def _end_runs(self) -> None:
        """The operator is gone or stopping: no run may outlive the worker."""
        if self.spare is not None:
            self.spare.socket.close()  # a spare waiting for its run ends at that
            self.spare = None
        for pid in list(self.runs):
            for member in [pid, *process.descendants(pid)]:
                try:
                    os.kill(member, signal.SIGKILL)
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        while self.runs and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)


def _fork() -> int:
    """`os.fork()`, with this process's buffered output written first so no child repeats it."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    return os.fork()


def _run_request(sock: socket.socket) -> run.Request | None:
    """In a spare: its run request, once it has told the zygote it took it; None when the zygote
    is gone or has no run for it."""
    received = protocol.receive(sock)
    if received is None:
        sock.close()
        return None
    sock.send(_TAKEN)
    sock.close()
    message, fds = received
    return protocol.run_request(message), fds[0], fds[1]
