"""Patches: `ansible.plugins.connection.local.subprocess` (its `Popen` of a module call forks),
Ansible's choice to pipeline a module on the local connection
(`ansible.plugins.action.ActionBase._is_pipelining_enabled` in 2.18,
`ansible.plugins.connection.local.Connection.is_pipelining_enabled` in 2.19), and in module
processes Python's `zipimport._compile_source`. Knows: ansible-core 2.18 to 2.21 (whichever of the
two pipelining methods this Ansible has; only the exact command line Ansible's `local` connection
runs for a module is taken, any other goes to the real `Popen`).

Module processes: where Ansible's `local` connection would start `python AnsiballZ_<module>.py`
(with `subprocess.Popen`), a warm run forks the Ansible worker process instead and runs the same
file with `runpy`, in a process that has Ansible's own modules unloaded (the module imports them
from its payload, as a new interpreter would) but keeps the third-party libraries the worker
imported once (the kubernetes client above all).

Only the plain case is taken: no privilege escalation, no `async`, the module's interpreter
being the worker's own. Everything else goes to the real Popen unchanged. A pipelined
kubernetes.core or operator_sdk.util module runs in the task's own process instead of a fork of
it (`modules_in_place`).

A module on the local connection is pipelined, as Ansible does when `pipelining` is on: its
AnsiballZ source goes to the interpreter's standard input instead of a file in a remote temporary
directory. Without it, each module call runs four shell commands besides the module (`echo ~`,
`mkdir`, `chmod u+x`, `rm -rf`), each a fork of the task's process and an exec of `/bin/sh` and its
commands: some 40 to 60 ms a module on a two-core machine. It is taken where Ansible would run the
same module from a file: the `local` connection, no privilege escalation (`become`), no `async`, not
`keep_remote_files`; Ansible's own setting still pipelines anything else it would. A module run so
gets no `_ansible_tmpdir` and makes its own temporary directory under `remote_tmp` if it needs one,
as under pipelining. The forked module process runs the source it is given, as
`python < AnsiballZ_<module>.py` would.
"""

from __future__ import annotations

import _imp
import atexit
import builtins
import hashlib
import importlib.util
import marshal
import os
import re
import runpy
import selectors
import shlex
import subprocess
import sys
import zipimport
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .. import kept, kubernetes_state, process
from . import inline_tasks, module_utils, modules_in_place

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCRIPT = re.compile(r"^AnsiballZ_[\w.]+\.py$")


@dataclass(frozen=True)
class ModuleCall:
    """A module invocation recognised in a shell command line."""

    #: `NAME=value` prefixes of the command (language, the task's `environment`).
    env: dict[str, str]
    #: The AnsiballZ file; None when the module's source comes on standard input (pipelining).
    script: str | None
    #: The interpreter the command names.
    interpreter: str


def parse(command: str | bytes, python: str) -> ModuleCall | None:
    """The module call in the command line Ansible's local connection runs
    (`/bin/sh -c 'LANG=C.UTF-8 /venv/bin/python3 /tmp/.../AnsiballZ_k8s.py && sleep 0'`), when it
    is exactly that, with an interpreter that is `python`; None otherwise."""
    if isinstance(command, bytes):
        try:
            command = command.decode()
        except UnicodeDecodeError:
            return None
    try:
        outer = shlex.split(command)
    except ValueError:
        return None
    if len(outer) != 3 or outer[1] != "-c" or not os.path.isabs(outer[0]):
        return None
    try:
        words = shlex.split(outer[2])
    except ValueError:
        return None
    if words[-3:] == ["&&", "sleep", "0"]:
        words = words[:-3]
    env: dict[str, str] = {}
    while words and "=" in words[0]:
        name, _, value = words[0].partition("=")
        if not _NAME.match(name):
            return None
        env[name] = value
        words = words[1:]
    if len(words) == 1:
        interpreter, script = words[0], None
    elif len(words) == 2:
        interpreter, script = words
        if not os.path.isabs(script) or not _SCRIPT.match(os.path.basename(script)) or not os.path.isfile(script):
            return None
    else:
        return None
    if not same_interpreter(interpreter, python):
        return None
    return ModuleCall(env=env, script=script, interpreter=interpreter)


def same_interpreter(interpreter: str, python: str) -> bool:
    """`interpreter` starts the same Python in the same environment (virtualenv) as `python`."""
    if not os.path.isabs(interpreter):
        return False
    return os.path.dirname(interpreter) == os.path.dirname(python) and os.path.realpath(interpreter) == os.path.realpath(
        python
    )


class ForkedModule:
    """What `subprocess.Popen` gives the local connection: the module runs in a fork, its output is
    collected by `communicate`. A pipelined module's fork waits for `communicate`, which brings its
    source; a pipelined module that runs in place (`modules_in_place`) runs there, in this
    process."""

    def __init__(self, call: ModuleCall, cwd: str | None) -> None:
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        self._call, self._cwd = call, cwd
        self._pipes: dict[int, bytearray] = {}
        self._output: tuple[bytes, bytes] | None = None
        if call.script is not None:
            self._start(None)

    def _start(self, source: bytes | None) -> None:
        call = self._call
        inline = inline_tasks.module_task_inline()
        if source is not None and modules_in_place.runs_in_place(source, inline=inline):
            self.returncode, out, err = modules_in_place.run(lambda: become_module(call, source, self._cwd))
            self._output = (out, err)
            return
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            os.close(out_read)
            os.close(err_read)
            _run_module(call, source, self._cwd, out_write, err_write)
        os.close(out_write)
        os.close(err_write)
        self.pid = pid
        self._pipes = {out_read: bytearray(), err_read: bytearray()}
        self._out, self._err = out_read, err_read

    def _started(self) -> bool:
        return bool(self._pipes) or self._output is not None

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]:  # noqa: A002
        """Reads the module's output to the end and waits for it."""
        if self._call.script is None:
            if not self._started():
                self._start(input or b"")
        elif input:
            raise ValueError("a module run from its file takes no input")
        if self._output is not None:
            return self._output
        with selectors.DefaultSelector() as selector:
            for fd in self._pipes:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        self._pipes[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
                        os.close(key.fd)
        self.wait()
        return bytes(self._pipes[self._out]), bytes(self._pipes[self._err])

    def wait(self, timeout: float | None = None) -> int:
        """Waits for the module process and returns its status as Popen does (-N for signal N)."""
        if not self._started():
            self.communicate()
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """The status if the module process has ended."""
        if self.returncode is None and self._pipes:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Subprocess(ModuleType):
    """`subprocess` as the local connection plugin sees it: Popen of a module call forks."""

    def __init__(self, python: str) -> None:
        super().__init__("subprocess")
        self._python = python

    def __getattr__(self, name: str) -> Any:
        return getattr(subprocess, name)

    def Popen(self, args: Any, *rest: Any, **kwargs: Any) -> Any:  # noqa: N802 - subprocess's name
        inline_tasks.module_started()
        call = parse(args, self._python) if kwargs.get("shell") and not rest else None
        if call is None or kwargs.get("stdin") != subprocess.PIPE:
            return subprocess.Popen(args, *rest, **kwargs)
        return ForkedModule(call, kwargs.get("cwd"))


def install() -> None:
    """Makes Ansible's local connection fork for module calls, and pipeline the plain ones, in this
    process and its forks."""
    from ansible.plugins.connection import local

    local.subprocess = _Subprocess(sys.executable)  # type: ignore[attr-defined]
    _pipeline_plain_local_modules(local.Connection)


def _pipeline_plain_local_modules(local_connection: type) -> None:
    """Ansible pipelines a module on the `local` connection (exactly that class) when it would
    otherwise run it from a file: no `become`, no `async`, not `keep_remote_files`."""
    from ansible import constants
    from ansible.plugins.action import ActionBase

    def plain(connection: Any, wrap_async: bool) -> bool:
        return (
            type(connection) is local_connection
            and not connection.become
            and not wrap_async
            and not constants.DEFAULT_KEEP_REMOTE_FILES
        )

    if hasattr(local_connection, "is_pipelining_enabled"):  # ansible-core 2.19: the connection decides
        decide = local_connection.is_pipelining_enabled

        def connection_pipelines(self: Any, wrap_async: bool = False) -> bool:
            return bool(decide(self, wrap_async)) or plain(self, wrap_async)

        local_connection.is_pipelining_enabled = connection_pipelines  # type: ignore[attr-defined]
        return
    decide_action = ActionBase._is_pipelining_enabled

    def action_pipelines(self: Any, module_style: str, wrap_async: bool = False) -> bool:
        if decide_action(self, module_style, wrap_async):
            return True
        return module_style == "new" and plain(self._connection, wrap_async)

    ActionBase._is_pipelining_enabled = action_pipelines  # type: ignore[method-assign]


def _run_module(call: ModuleCall, source: bytes | None, cwd: str | None, stdout: int, stderr: int) -> None:
    """In the module process: `become_module` with standard input from `/dev/null` and standard
    output and error on `stdout` and `stderr`, then exit as the interpreter would; never returns."""
    status = 1
    try:
        process.set_name(call.interpreter)
        stdin = os.open(os.devnull, os.O_RDONLY)
        process.redirect(stdin, stdout, stderr)
        for fd in {stdin, stdout, stderr} - {0, 1, 2}:
            os.close(fd)
        status = become_module(call, source, cwd)
    finally:
        process.finish(status)


def become_module(call: ModuleCall, source: bytes | None, cwd: str | None) -> int:
    """With descriptors 0 to 2 set: become `python <script>` (or `python` reading `source` from
    its standard input), with the call's environment variables, in `cwd`, with a new interpreter's
    signal handlers, standard streams, kubernetes client state and no exit handlers, Ansible set
    aside, and run it; its status, before the exit handlers run."""
    os.environ.update(call.env)
    if cwd:
        os.chdir(cwd)
    kubernetes_state.fresh()
    process.reset_signals()
    process.standard_streams()
    atexit._clear()
    unload_ansible()
    module_utils.install()
    cache_payload_bytecode()
    if call.script is None:
        sys.argv = [""]
        sys.path[:] = ["", *process.BASE_SYS_PATH]
        return process.run_main(lambda: run_source(source or b""))
    script = call.script
    sys.argv = [script]
    sys.path[:] = [os.path.dirname(script), *process.BASE_SYS_PATH]
    return process.run_main(lambda: runpy.run_path(script, run_name="__main__"))


def run_source(source: bytes) -> None:
    """Runs a script's source as the interpreter runs one read from its standard input: in a new
    `__main__` module that has no `__file__`."""
    main = ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    exec(compile(source, "<stdin>", "exec"), main.__dict__)  # noqa: S102 - the module Ansible runs


def unload_ansible() -> None:
    """Forgets Ansible and the collection loader, so the module imports `ansible.module_utils` and
    collection code from its own payload, as in a new interpreter."""
    for name in [n for n in sys.modules if n.split(".", 1)[0] in ("ansible", "ansible_collections")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not module_utils.is_ansible(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not module_utils.is_ansible(h)]
    sys.path_importer_cache.clear()


def cache_payload_bytecode() -> None:
    """A module's payload is a zip of Python sources, which a new interpreter compiles at every
    import (zipimport keeps no bytecode): a tenth of a second for the kubernetes.core modules. The
    same source gives the same code, so the worker keeps code it compiled itself (`kept`) by the
    hash of the source (and of this Python's bytecode version), and only its file name is set to
    the payload's. A source it does not have is compiled here and reported to it."""
    if "bytecode" not in kept.KINDS:
        return

    def cached(pathname: str, source: bytes) -> object:
        code = BYTECODE.get(_bytecode_key(source))
        if code is None:
            kept.report("bytecode", {}, source)
        return compiled(pathname, source)

    zipimport._compile_source = cached  # type: ignore[attr-defined]


def compiled(pathname: str, source: bytes) -> object:
    """A payload's source compiled, as zipimport does; the code the worker keeps for it when it
    has it, with its file name set to `pathname`."""
    code = BYTECODE.get(_bytecode_key(source))
    if code is None:
        return _COMPILE_SOURCE(pathname, source)
    _imp._fix_co_filename(code, pathname)
    return code


def _bytecode_key(source: bytes) -> str:
    return hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()


def _derive_bytecode(meta: dict[str, Any], source: bytes) -> tuple[str, Any, int] | None:
    """In the worker's learner: the code of a module source a run reported, compiled here."""
    code = _COMPILE_SOURCE("<payload>", source)
    return _bytecode_key(source), code, len(marshal.dumps(code))


#: How zipimport compiles a source (before `cache_payload_bytecode` wraps it).
_COMPILE_SOURCE = zipimport._compile_source  # type: ignore[attr-defined]

#: Compiled module sources, by `_bytecode_key`.
BYTECODE = kept.Store(max_entries=4096, max_bytes=32 << 20)


def install_bytecode() -> None:
    """In the worker: module processes are served the code it compiled, and report what it lacks."""
    kept.register("bytecode", BYTECODE, _derive_bytecode)
