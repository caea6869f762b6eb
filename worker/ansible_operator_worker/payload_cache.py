"""Module payloads kept across runs. Ansible builds each module's AnsiballZ payload (the module and
every module_util it imports, found by parsing them, then zipped) once per ansible-playbook process,
into that process's local temporary directory: a tenth of a second or more for each kubernetes.core
module in every run. A payload a run built is kept in the worker's store beside the files it was
built from (path, size, modification time); a later run starts with the payloads whose files are
all unchanged, so Ansible finds them in its own cache and uses them as it would its own.

The files are those opened for reading while Ansible built the payload, seen through an audit hook
(`sys.addaudithook`): the module, its module_utils, whatever Ansible read to resolve them.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Callable
from typing import Any

from .files import private_dir, write_atomically

#: Where payloads are kept (set by the zygote; None: not kept).
STORE: str | None = None

#: The suffix of the file listing what a payload was built from.
_SOURCES = ".sources.json"

#: Paths opened for reading while a payload is being built, in this process; None otherwise.
_opened: list[str] | None = None


def install(store: str | None) -> None:
    """Watches payload builds from now on (in this process and its forks) and keeps them in
    `store`, a directory of this worker, by Ansible's and Python's version."""
    global STORE
    if store is None:
        return
    from ansible import __version__, constants
    from ansible.executor import module_common
    from ansible.plugins import action

    STORE = private_dir(os.path.join(store, f"{__version__}-py{sys.version_info[0]}.{sys.version_info[1]}"))
    if STORE is None:
        return
    sys.addaudithook(_record_open)
    build = _recording(module_common.modify_module, lambda: constants.DEFAULT_LOCAL_TMP)
    module_common.modify_module = build
    action.modify_module = build  # imported by name there


def restore(local_tmp: str) -> int:
    """Puts the kept payloads whose files are unchanged into Ansible's cache in `local_tmp`;
    returns how many."""
    if STORE is None:
        return 0
    cache = os.path.join(local_tmp, "ansiballz_cache")
    restored = 0
    for name in _names(STORE):
        kept = os.path.join(STORE, name)
        sources = _read_sources(kept)
        if sources is None or not _unchanged(sources["files"]) or _digest(kept) != sources["sha256"]:
            continue
        try:
            os.makedirs(cache, exist_ok=True)
            shutil.copyfile(kept, os.path.join(cache, name))
        except OSError:
            continue
        restored += 1
    return restored


def keep(local_tmp: str) -> int:
    """Keeps the payloads this run built (those with a list of sources) in the store; returns how
    many."""
    if STORE is None:
        return 0
    cache = os.path.join(local_tmp, "ansiballz_cache")
    kept = 0
    for name in _names(cache):
        built = os.path.join(cache, name)
        sources = _read_sources(built)
        if sources is None or _digest(built) != sources["sha256"]:
            continue
        try:
            with open(built, "rb") as file:
                payload = file.read()
        except OSError:
            continue
        # The payload first: a list of sources never describes a payload that is not there.
        if write_atomically(os.path.join(STORE, name), payload) and write_atomically(
            os.path.join(STORE, name + _SOURCES), json.dumps(sources).encode()
        ):
            kept += 1
    return kept


def _recording(build: Callable[..., Any], local_tmp: Callable[[], str]) -> Callable[..., Any]:
    """`modify_module`, noting what each payload it builds into the cache in `local_tmp()` was
    built from (the audit hook must be installed)."""

    @functools.wraps(build)
    def modify_module(*args: Any, **kwargs: Any) -> Any:
        global _opened
        tmp = local_tmp()
        cache = os.path.join(tmp, "ansiballz_cache")
        before = set(_names(cache))
        _opened = []
        try:
            return build(*args, **kwargs)
        finally:
            opened, _opened = _opened, None
            for name in set(_names(cache)) - before:
                _note_sources(os.path.join(cache, name), opened, tmp)

    return modify_module


def _record_open(event: str, args: tuple[Any, ...]) -> None:
    if event != "open" or _opened is None:
        return
    path, mode, flags = args
    if isinstance(mode, str):
        reading = "r" in mode and "+" not in mode
    else:
        reading = isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY
    if reading and isinstance(path, (str, bytes)):
        _opened.append(os.fsdecode(path))


def _note_sources(payload: str, opened: list[str], local_tmp: str) -> None:
    """Writes beside `payload` the files it was built from (its own temporary files left out)."""
    files = []
    for path in dict.fromkeys(os.path.abspath(p) for p in opened):
        if path.startswith(local_tmp + os.sep):
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        files.append([path, stat.st_size, stat.st_mtime_ns])
    sources = {"files": files, "sha256": _digest(payload)}
    write_atomically(payload + _SOURCES, json.dumps(sources).encode())


def _unchanged(files: list[list[Any]]) -> bool:
    for path, size, mtime_ns in files:
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
            return False
    return True


def _names(directory: str) -> list[str]:
    """The payload files in a cache or store directory."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    return [n for n in entries if not n.endswith((_SOURCES, ".lock", "-part", ".tmp"))]


def _read_sources(payload: str) -> dict[str, Any] | None:
    try:
        with open(payload + _SOURCES, "rb") as file:
            sources = json.loads(file.read())
    except (OSError, ValueError):
        return None
    return sources if isinstance(sources, dict) and "files" in sources and "sha256" in sources else None


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as file:
            return hashlib.sha256(file.read()).hexdigest()
    except OSError:
        return None
