"""Patches: `ansible.executor.module_common.modify_module` (and `ansible.plugins.action.modify_module`,
imported there by name). Knows: ansible-core 2.18 (positional arguments) and 2.19 (keywords; payload
names with extensions), no version check.

Module payloads kept across runs. Ansible builds each module's AnsiballZ payload (the module and
every module_util it imports, found by parsing them, then zipped) once per ansible-playbook process,
into that process's local temporary directory: a tenth of a second or more for each kubernetes.core
module in every run.

The worker keeps payloads its learner built itself (`kept`). A run that builds a payload reports
the module's name and path; the learner finds the module by that name as the worker finds it,
builds the payload only when that gives the same file, and notes the files it read while building
(the module, its module_utils; seen through an audit hook, `sys.addaudithook`) with their size and
modification time. When Ansible in a run is about to build the payload of a module file, the
worker's payload for that file is put into the run's own cache first, if every file it was built
from is unchanged and the run finds modules and module_utils where the worker does; Ansible then
uses it as its own. A run writes only its own cache, which no other run reads.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from typing import Any

from .. import kept

#: Payloads the worker built, by module path: `(name, payload, files, search paths)`.
STORE = kept.Store(max_entries=256, max_bytes=64 << 20)

#: Paths opened for reading while a payload is being built, in this process; None otherwise.
_opened: list[str] | None = None

#: Ansible's `modify_module`, as it was before `install`.
_build: Callable[..., Any] | None = None


def install() -> None:
    """Serves payloads the worker built, and reports the ones a run builds, from now on (in this
    process and its forks)."""
    global _build
    from ansible.executor import module_common
    from ansible.plugins import action

    if _build is not None:
        return
    _build = module_common.modify_module
    sys.addaudithook(_record_open)
    served = _serving(_build)
    module_common.modify_module = served
    action.modify_module = served  # imported by name there
    kept.register("payload", STORE, _derive)


def _serving(build: Callable[..., Any]) -> Callable[..., Any]:
    """`modify_module`, with the worker's payload of the module put in the run's cache first, and
    what it built itself reported."""

    @functools.wraps(build)
    def modify_module(*args: Any, **kwargs: Any) -> Any:
        from ansible import constants

        # Ansible 2.18 passes the first two by position, 2.19 takes only keywords.
        module_name = kwargs["module_name"] if "module_name" in kwargs else args[0]
        module_path = kwargs["module_path"] if "module_path" in kwargs else args[1]
        cache = os.path.join(constants.DEFAULT_LOCAL_TMP, "ansiballz_cache")
        served = _serve(module_path, cache)
        before = set(_names(cache))
        result = build(*args, **kwargs)
        if served is None:
            for name in set(_names(cache)) - before:
                kept.report("payload", {"module_name": module_name, "module_path": module_path, "name": name}, b"")
        return result

    return modify_module


def _serve(module_path: str, cache: str) -> str | None:
    """Puts the worker's payload of `module_path` into `cache` when it may be used; its name."""
    entry = STORE.get(module_path)
    if entry is None:
        return None
    name, payload, files, paths = entry
    target = os.path.join(cache, name)
    if os.path.exists(target):
        return name
    if paths != _search_paths() or not _unchanged(files):
        return None
    try:
        os.makedirs(cache, exist_ok=True)
        with open(f"{target}.{os.getpid()}-part", "wb") as file:
            file.write(payload)
        os.replace(f"{target}.{os.getpid()}-part", target)
    except OSError:
        return None
    return name


def _derive(meta: dict[str, Any], data: bytes) -> tuple[str, Any, int] | None:
    """In the worker's learner: builds the payload a run reported, when the worker finds the same
    module file by the module's name."""
    global _opened
    from ansible import constants
    from ansible.plugins.loader import module_loader

    module_name, module_path, name = meta["module_name"], meta["module_path"], meta["name"]
    if not all(isinstance(value, str) for value in (module_name, module_path, name)):
        return None
    # Ansible's name for it: `<fqn>-<compression>`, in 2.19 with `-<extensions>` after it.
    parts = name.split("-")
    compression = parts[1] if len(parts) > 1 else ""
    if compression not in ("ZIP_DEFLATED", "ZIP_STORED") or os.sep in name or name.startswith("."):
        return None
    _init_plugin_loader()
    found = module_loader.find_plugin_with_context(module_name, mod_type=".py")
    if not found.resolved or os.path.realpath(found.plugin_resolved_path) != os.path.realpath(module_path):
        return None
    local_tmp = tempfile.mkdtemp(prefix="ansible-operator-learner-")
    constants.DEFAULT_LOCAL_TMP = local_tmp
    _opened = []
    try:
        assert _build is not None
        _build(
            module_name=module_name,
            module_path=module_path,
            module_args={},
            templar=_templar(),
            task_vars={"ansible_python_interpreter": sys.executable},
            module_compression=compression,
        )
        opened, _opened = _opened, None
        with open(os.path.join(local_tmp, "ansiballz_cache", name), "rb") as file:
            payload = file.read()
        files = _files(opened, local_tmp)
    finally:
        _opened = None
        shutil.rmtree(local_tmp, ignore_errors=True)
    return module_path, (name, payload, files, _search_paths()), len(payload)


def _init_plugin_loader() -> None:
    """In the learner: the plugin loader and the collection loader, as a run's CLI installs them
    with the worker's settings."""
    from ansible.plugins.loader import init_plugin_loader
    from ansible.utils.collection_loader import AnsibleCollectionConfig

    if AnsibleCollectionConfig.collection_finder is None:
        init_plugin_loader()


def _templar() -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader())


def _search_paths() -> Any:
    """The directories this process finds module_utils and collections in (a run adds its
    playbook's `collections`, which seldom exists)."""
    try:
        from ansible.plugins.loader import module_utils_loader
        from ansible.utils.collection_loader import AnsibleCollectionConfig

        paths = (module_utils_loader._get_paths(subdirs=False), AnsibleCollectionConfig.collection_paths)
        return tuple(tuple(p for p in found if os.path.isdir(p)) for found in paths)
    except Exception:  # noqa: BLE001 - then no payload is served
        return None


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


def _files(opened: list[str], local_tmp: str) -> tuple[tuple[str, int, int], ...]:
    """The files a payload was built from, with their size and modification time (its own
    temporary files left out)."""
    files = []
    for path in dict.fromkeys(os.path.abspath(p) for p in opened):
        if path.startswith(local_tmp + os.sep):
            continue
        try:
            stat = os.stat(path)
        except OSError:
            continue
        files.append((path, stat.st_size, stat.st_mtime_ns))
    return tuple(files)


def _unchanged(files: tuple[tuple[str, int, int], ...]) -> bool:
    for path, size, mtime_ns in files:
        try:
            stat = os.stat(path)
        except OSError:
            return False
        if (stat.st_size, stat.st_mtime_ns) != (size, mtime_ns):
            return False
    return True


def _names(directory: str) -> list[str]:
    """The payload files in a cache directory."""
    try:
        entries = os.listdir(directory)
    except OSError:
        return []
    return [n for n in entries if not n.endswith((".lock", "-part", ".tmp"))]
