"""Patches: `ansible.plugins.loader.PluginLoader._load_config_defs`. Knows: ansible-core 2.18
(`parse_cache.documentation_kept()`; 2.19 and later: not installed).

The settings of the builtin plugins every run loads, registered once by the worker (ansible-core
2.18). The first time a process loads a configurable plugin (callback, connection, become, shell,
inventory, vars, cache, lookup...), Ansible reads its `DOCUMENTATION`, merges the fragments it
extends and registers the options under the plugin's type and name; every run loads some twenty
of them, each time anew. The worker registers those of the plugins it imported, and a run keeps
them while it reads its settings from what the worker read them from (`ansible_state.inputs`; a
run that reads all its settings again starts with none, as Ansible does).

ansible-runner's `awx_display`, the stdout callback of every run, is registered too: the worker
does not import it (importing it reads the run's environment), so its documentation is read from
its source.

A plugin that declares no settings (the `auto`, `ini` and `toml` inventory plugins, the `oneline`
callback...) has nothing to register, so Ansible reads its documentation again at every load, to
find nothing. The worker notes those, and a run's loads of them read nothing.

A run's load checks that it is the same file with the same documentation, and that no playbook
added a `doc_fragments` directory (which could change a fragment it merges): otherwise that
plugin's settings are read from its own documentation, as a new process would."""

from __future__ import annotations

import ast
import os
import sys
import types
from typing import Any

from . import parse_cache

#: The plugins registered by the worker: (type, name) to the file and documentation their
#: settings were read from.
_registered: dict[tuple[str, str], tuple[str, object]] = {}

#: The plugins whose documentation declares no settings: (type, name) to its file and
#: documentation.
_without_settings: dict[tuple[str, str], tuple[str, object]] = {}


def install() -> None:
    """In the worker, once its settings are read: registers the settings of the configurable
    builtin plugins it imported and of ansible-runner's callback, notes those without settings, and
    makes a run's loads of them check what they load."""
    from ansible.plugins import loader

    if not parse_cache.documentation_kept():
        return
    _register_imported(loader)
    _register_runner_callback(loader)
    original = loader.PluginLoader._load_config_defs

    def load_config_defs(self: Any, name: str, module: Any, path: str) -> None:
        if self.class_name:
            key = (loader.get_plugin_class(self.class_name), name)
            read = (path, getattr(module, "DOCUMENTATION", None))
            fragments_as_read = not loader.fragment_loader._extra_dirs
            kept = _registered.pop(key, None)
            if kept is not None and (kept != read or not fragments_as_read):
                _forget(*key)
            elif _without_settings.get(key) == read and fragments_as_read:
                return  # Ansible would read the documentation to find no settings in it
        original(self, name, module, path)

    loader.PluginLoader._load_config_defs = load_config_defs  # type: ignore[method-assign]


def _register_imported(loader: Any) -> None:
    for module_name, module in list(sys.modules.items()):
        parts = module_name.split(".")
        path = getattr(module, "__file__", None)
        if len(parts) != 4 or parts[:2] != ["ansible", "plugins"] or not path:
            continue
        _register(loader, parts[2], parts[3], module, path)


def _register_runner_callback(loader: Any) -> None:
    from ansible_runner.utils import get_callback_dir

    path = os.path.join(get_callback_dir(), "awx_display.py")
    documentation = _documentation_in_source(path)
    if documentation is not None:
        _register(loader, "callback", "awx_display", types.SimpleNamespace(DOCUMENTATION=documentation), path)


def _register(loader: Any, plugin_type: str, name: str, module: Any, path: str) -> None:
    from ansible import constants

    plugin_loader = getattr(loader, f"{plugin_type}_loader", None)
    if plugin_type not in constants.CONFIGURABLE_PLUGINS or plugin_loader is None:
        return
    try:
        plugin_loader._load_config_defs(name, module, path)
    except Exception:  # noqa: BLE001 - a run reads it again and reports what is wrong
        _forget(plugin_type, name)
        return
    read = (path, getattr(module, "DOCUMENTATION", None))
    if constants.config.has_configuration_definition(plugin_type, name):
        _registered[(plugin_type, name)] = read
    else:
        _without_settings[(plugin_type, name)] = read


def _documentation_in_source(path: str) -> str | None:
    """The text a module's top-level `DOCUMENTATION = "..."` assigns, read without importing it."""
    try:
        with open(path, "rb") as file:
            tree = ast.parse(file.read(), path)
    except (OSError, SyntaxError, ValueError):
        return None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and [getattr(target, "id", None) for target in node.targets] == ["DOCUMENTATION"]
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            return node.value.value
    return None


def _forget(plugin_type: str, name: str) -> None:
    from ansible import constants

    constants.config._plugins.get(plugin_type, {}).pop(name, None)
