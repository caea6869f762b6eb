"""Patches: `ansible.plugins.connection.local.subprocess` (its `Popen` of a module call forks),
and in module processes Python's `zipimport._compile_source`. Knows: ansible-core 2.18 and 2.19 (no
version check: only the exact command line Ansible's `local` connection runs for a module is
taken, any other goes to the real `Popen`).

Module processes: where Ansible's `local` connection would start `python AnsiballZ_<module>.py`
(with `subprocess.Popen`), a warm run forks the Ansible worker process instead and runs the same
file with `runpy`, in a process that has Ansible's own modules unloaded (the module imports them
from its payload, as a new interpreter would) but keeps the third-party libraries the worker
imported once (the kubernetes client above all).

Only the plain case is taken: no privilege escalation, no pipelining, no `async`, the module's
interpreter being the worker's own. Everything else goes to the real Popen unchanged.
"""

from __future__ import annotations

import _imp
import atexit
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

from .. import kept, process

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SCRIPT = re.compile(r"^AnsiballZ_[\w.]+\.py$")


@dataclass(frozen=True)
class ModuleCall:
    """A module invocation recognised in a shell command line."""

    #: `NAME=value` prefixes of the command (language, the task's `environment`).
    env: dict[str, str]
    #: The AnsiballZ file.
    script: str
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
    if len(words) != 2:
        return None
    interpreter, script = words
    if not same_interpreter(interpreter, python):
        return None
    if not os.path.isabs(script) or not _SCRIPT.match(os.path.basename(script)) or not os.path.isfile(script):
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
    collected by `communicate`."""

    def __init__(self, call: ModuleCall, cwd: str | None) -> None:
        self.returncode: int | None = None
        self.stdin = self.stdout = self.stderr = None
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid == 0:
            os.close(out_read)
            os.close(err_read)
            _run_module(call, cwd, out_write, err_write)
        os.close(out_write)
        os.close(err_write)
        self.pid = pid
        self._pipes = {out_read: bytearray(), err_read: bytearray()}
        self._out, self._err = out_read, err_read

    def communicate(self, input: bytes | None = None, timeout: float | None = None) -> tuple[bytes, bytes]:  # noqa: A002
        """Reads the module's output to the end and waits for it."""
        if input:
            raise ValueError("a forked module takes no input")
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
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def poll(self) -> int | None:
        """The status if the module process has ended."""
        if self.returncode is None:
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
        call = parse(args, self._python) if kwargs.get("shell") and not rest else None
        if call is None or kwargs.get("stdin") != subprocess.PIPE:
            return subprocess.Popen(args, *rest, **kwargs)
        return ForkedModule(call, kwargs.get("cwd"))


def install() -> None:
    """Makes Ansible's local connection fork for module calls in this process and its forks."""
    from ansible.plugins.connection import local

    local.subprocess = _Subprocess(sys.executable)  # type: ignore[attr-defined]


def _run_module(call: ModuleCall, cwd: str | None, stdout: int, stderr: int) -> None:
    """In the module process: become `python <script>` and run it; never returns."""
    status = 1
    try:
        process.set_name(call.interpreter)
        atexit._clear()
        process.reset_signals()
        stdin = os.open(os.devnull, os.O_RDONLY)
        process.redirect(stdin, stdout, stderr)
        for fd in {stdin, stdout, stderr} - {0, 1, 2}:
            os.close(fd)
        os.environ.update(call.env)
        if cwd:
            os.chdir(cwd)
        process.standard_streams()
        _unload_ansible()
        _cache_payload_bytecode()
        sys.argv = [call.script]
        sys.path[:] = [os.path.dirname(call.script), *process.BASE_SYS_PATH]
        status = process.run_main(lambda: runpy.run_path(call.script, run_name="__main__"))
    finally:
        process.finish(status)


def _unload_ansible() -> None:
    """Forgets Ansible and the collection loader, so the module imports `ansible.module_utils` and
    collection code from its own payload, as in a new interpreter."""
    for name in [n for n in sys.modules if n.split(".", 1)[0] in ("ansible", "ansible_collections")]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if not _is_ansible(f)]
    sys.path_hooks[:] = [h for h in sys.path_hooks if not _is_ansible(h)]
    sys.path_importer_cache.clear()


def _cache_payload_bytecode() -> None:
    """A module's payload is a zip of Python sources, which a new interpreter compiles at every
    import (zipimport keeps no bytecode): a tenth of a second for the kubernetes.core modules. The
    same source gives the same code, so the worker keeps code it compiled itself (`kept`) by the
    hash of the source (and of this Python's bytecode version), and only its file name is set to
    the payload's. A source it does not have is compiled here and reported to it."""
    if "bytecode" not in kept.KINDS:
        return
    compile_source = _COMPILE_SOURCE

    def cached(pathname: str, source: bytes) -> object:
        code = BYTECODE.get(_bytecode_key(source))
        if code is None:
            code = compile_source(pathname, source)
            kept.report("bytecode", {}, source)
            return code
        _imp._fix_co_filename(code, pathname)
        return code

    zipimport._compile_source = cached  # type: ignore[attr-defined]


def _bytecode_key(source: bytes) -> str:
    return hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()


def _derive_bytecode(meta: dict[str, Any], source: bytes) -> tuple[str, Any, int] | None:
    """In the worker's learner: the code of a module source a run reported, compiled here."""
    code = _COMPILE_SOURCE("<payload>", source)
    return _bytecode_key(source), code, len(marshal.dumps(code))


#: How zipimport compiles a source (before `_cache_payload_bytecode` wraps it).
_COMPILE_SOURCE = zipimport._compile_source  # type: ignore[attr-defined]

#: Compiled module sources, by `_bytecode_key`.
BYTECODE = kept.Store(max_entries=4096, max_bytes=32 << 20)


def install_bytecode() -> None:
    """In the worker: module processes are served the code it compiled, and report what it lacks."""
    kept.register("bytecode", BYTECODE, _derive_bytecode)


def _is_ansible(thing: object) -> bool:
    module = getattr(thing, "__module__", None) or getattr(type(thing), "__module__", "")
    return str(module).split(".", 1)[0] == "ansible"
