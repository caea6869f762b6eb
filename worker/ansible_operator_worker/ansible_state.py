"""Ansible's process-global state, and how a fork of the worker gets the state a freshly started
`ansible-playbook` would have had. Written against ansible-core 2.18 to 2.21.

What Ansible captures when it is imported, and what is done about it here:
- `ansible.constants`: every setting, read from the environment and the ansible.cfg found from
  the working directory. The playbook process re-reads them in place (the ConfigManager instance
  is shared by reference with other modules in 2.19, so it is re-initialised, not replaced); when
  what they are read from is what the worker read them from (`inputs`), only the settings read
  when used are read again.
- Settings that other modules copy at import (task and play field defaults such as `timeout`,
  `no_log`, `strategy`; the log file; colours; the AnsiballZ template when remote files are kept):
  a run whose settings differ from the worker's anywhere but in `RUNTIME_SETTINGS` is not run
  warm (see `unsafe_differences`).
- Warnings and deprecations of the configuration: collected again, shown in the playbook process.
- `Display`, a singleton made at import: initialised again over the new standard streams.
- `ansible.utils.color`: decides at import whether stdout is a colour terminal: re-imported.
- Task UUIDs (`ansible.utils.vars`): a per-process random part and a counter: renewed.
- Module write locks (2.18, `action_write_locks`): multiprocessing locks made at import, which
  forks would share across runs: made anew.
- multiprocessing's authentication key: renewed.
- The local temporary directory (`DEFAULT_LOCAL_TMP`): made anew by the re-read, removed at exit.
- The collection loader and plugin filters: the worker never installs them; the CLI does, per run.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import importlib
import multiprocessing
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import Any

from . import process

#: Settings read only when used (never copied at import), so they may differ between the worker
#: and a run: per-run paths ansible-runner sets, the role path of role mode, the inventory
#: behaviour the operator sets for rendered inventories, and the collection path (the collection
#: loader is installed per run).
RUNTIME_SETTINGS = frozenset(
    {
        "CACHE_PLUGIN_CONNECTION",
        "COLLECTIONS_PATHS",
        "CONFIG_FILE",
        "DEFAULT_HOST_LIST",
        "DEFAULT_LOCAL_TMP",
        "DEFAULT_ROLES_PATH",
        "INVENTORY_UNPARSED_IS_FAILED",
    }
)

#: Setting types whose relative values Ansible resolves against the working directory.
_PATH_TYPES = frozenset({"path", "pathlist", "pathspec", "tmppath", "tmp", "temppath"})

Settings = dict[str, Any]
#: What settings are read from (see `inputs`).
Inputs = tuple[object, ...]


def _constants() -> ModuleType:
    # Imported when first needed: importing it reads the settings, which the zygote does only
    # after it has put ansible-runner's variables into its environment.
    from ansible import constants

    return constants


def core_version() -> tuple[int, ...]:
    """ansible-core's major and minor version."""
    from ansible.release import __version__

    return tuple(int(part) for part in __version__.split(".")[:2])


def settings() -> Settings:
    """The current value of every setting."""
    C = _constants()
    return {name: getattr(C, name, None) for name in C.config.get_configuration_definitions()}


def reread_settings() -> None:
    """Reads every setting again from the current environment and working directory, into the
    same ConfigManager and `ansible.constants`, as importing Ansible would. Warnings and
    deprecations it finds wait in the ConfigManager to be shown (`fresh_process_state`)."""
    C = _constants()
    _forget_noise()
    C.config.__init__()  # type: ignore[misc]
    _read(name for name in C.config.get_configuration_definitions())


def reread_runtime_settings() -> None:
    """Reads again only the settings read when used (`RUNTIME_SETTINGS`), for a run whose
    `inputs()` are the worker's: every other setting would be read as the worker read it."""
    _forget_noise()
    _read(name for name in _constants().config.get_configuration_definitions() if name in RUNTIME_SETTINGS)


def worker_inputs() -> Inputs | None:
    """In the worker: reads the settings other than `RUNTIME_SETTINGS` again (as importing Ansible
    read them) and says what they were read from, for runs to compare their `inputs()` with. None
    when reading them warned, deprecated or failed: those messages belong to every run, which then
    reads all."""
    C = _constants()
    _forget_noise()
    C.config.__init__()  # type: ignore[misc]
    _read(name for name in C.config.get_configuration_definitions() if name not in RUNTIME_SETTINGS)
    noisy = bool(type(C.config).WARNINGS or type(C.config).DEPRECATED or getattr(C.config, "_errors", None))
    return None if noisy else inputs()


def inputs() -> Inputs | None:
    """What the settings other than `RUNTIME_SETTINGS` are read from, in the current environment
    and working directory: the ansible.cfg found, with its identity; every variable those settings
    may be read from, and HOME; and the working directory when a path among those variables is
    relative. Equal inputs read equal settings. None when looking for ansible.cfg warns."""
    from ansible.config.manager import find_ini_config_file

    warnings: set[str] = set()
    path = find_ini_config_file(warnings)
    if warnings:
        return None
    try:
        found = os.stat(path) if path else None
    except OSError:
        return None
    identity = None if found is None else (found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns)
    variables = _input_variables()
    values = tuple((name, os.environ.get(name)) for name, _ in variables)
    relative = any(
        is_path and value is not None and _has_relative_path(value)
        for (_, is_path), (_, value) in zip(variables, values)
    )
    return (path, identity, values, os.getcwd() if relative else None)


@functools.cache
def _input_variables() -> tuple[tuple[str, bool], ...]:
    """Every environment variable a setting other than `RUNTIME_SETTINGS` may be read from, with
    whether it holds paths; and HOME (`~`) and ANSIBLE_CONFIG."""
    variables = {"HOME": False, "ANSIBLE_CONFIG": False}
    for name, definition in _constants().config.get_configuration_definitions().items():
        if name in RUNTIME_SETTINGS:
            continue
        for entry in definition.get("env") or ():
            variables[entry["name"]] = variables.get(entry["name"], False) or definition.get("type") in _PATH_TYPES
    return tuple(sorted(variables.items()))


def _has_relative_path(value: str) -> bool:
    return any(part and not part.startswith(("/", "~")) for part in value.replace(",", os.pathsep).split(os.pathsep))


def _forget_noise() -> None:
    """Empties what reading settings collects to be shown: warnings, deprecations and (2.19)
    errors."""
    config = _constants().config
    type(config).WARNINGS.clear()
    type(config).DEPRECATED.clear()
    errors = getattr(config, "_errors", None)
    if isinstance(errors, list):
        errors.clear()


def _read(names: Iterable[str]) -> None:
    C = _constants()
    namespace = vars(C)
    for name in names:
        C.set_constant(name, C.config.get_config_value(name, variables=namespace))


@contextlib.contextmanager
def environment_of(env: dict[str, str], cwd: str) -> Iterator[None]:
    """Runs the body with `env` as the process environment and `cwd` as working directory."""
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    process.replace_environment(env)
    os.chdir(cwd)
    try:
        yield
    finally:
        process.replace_environment(saved_env)
        os.chdir(saved_cwd)


def unsafe_differences(worker: Settings, run: Settings) -> list[str]:
    """Settings whose value differs between the worker and a run, other than the ones read only
    when used: a run with any of them is not run warm."""
    return sorted(
        name for name in set(worker) | set(run) if name not in RUNTIME_SETTINGS and worker.get(name) != run.get(name)
    )


def forget_worker_local_tmp() -> None:
    """The worker's own local temporary directory (made when Ansible was imported) is removed now
    and its exit handler dropped: every run makes its own, and a fork must not delete anything at
    exit that it did not make."""
    from ansible.utils.path import cleanup_tmp_file

    atexit.unregister(cleanup_tmp_file)
    path = getattr(_constants(), "DEFAULT_LOCAL_TMP", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


def fresh_process_state() -> None:
    """In the playbook process, after its standard streams are in place: the state that importing
    Ansible in a new `ansible-playbook` would have made."""
    from ansible.utils.display import Display

    Display().__init__()  # type: ignore[misc]
    _show_config_warnings()
    import ansible.utils.color

    importlib.reload(ansible.utils.color)
    import ansible.utils.vars as ansible_vars

    ansible_vars.cur_id = 0
    ansible_vars.random_int = ("%08x" % secrets.randbelow(2**32))[:8]
    if not _write_locks_renewed:
        renew_write_locks()
    multiprocessing.current_process().authkey = os.urandom(32)


def _show_config_warnings() -> None:
    # ansible-core 2.18 shows them when ansible.constants is imported; 2.19 from CLI.run, per run.
    handle_config_noise = getattr(_constants(), "handle_config_noise", None)
    if handle_config_noise is not None:
        handle_config_noise()


#: Whether this process, or the run process that forked it, made the write locks anew.
_write_locks_renewed = False


def renew_write_locks() -> None:
    """Ansible's module write locks (ansible-core < 2.19; some 3 ms for 27 semaphores) made anew:
    the run's own, shared with no other run. A run process makes them before it knows its run,
    and the playbook process it forks takes them."""
    global _write_locks_renewed
    _write_locks_renewed = True
    try:
        from ansible.executor import action_write_locks  # ansible-core < 2.19
    except ImportError:
        return
    from ansible.utils.multiprocessing import context

    locks = action_write_locks.action_write_locks
    for name in list(locks):
        locks[name] = context.Lock()
