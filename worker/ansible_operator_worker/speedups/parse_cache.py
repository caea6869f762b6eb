"""Patches: `ansible.utils.collection_loader._collection_finder._meta_yml_to_dict`,
`ansible.config.manager.ConfigManager._read_config_yaml_file`, and below 2.19 the `AnsibleLoader` of
`ansible.plugins.loader` and `ansible.utils.plugin_docs`. Knows: ansible-core 2.18 to 2.21 (plugin
documentation is kept only below 2.19: `documentation_kept()`).

YAML that every run parses the same way, parsed once as the worker starts: Ansible's setting definitions
(`config/base.yml`, read whenever the settings are read), collections' routing metadata
(`meta/runtime.yml`; the one of `ansible.builtin` alone is some 7,000 lines), and the documentation
of the plugins every run loads (their `DOCUMENTATION` and its fragments: Ansible reads the
plugin's settings from it each time a run's settings are read, a quarter of a short play's time).
Results are kept by the hash of the bytes parsed (and, for documentation, the file name its
positions name), so a file that changes is parsed anew, and every caller gets its own copy
(unpickled), so nothing a run does to it reaches another run.

Unpickling the routing metadata of `ansible.builtin` (2 MiB of objects) takes some 5 ms of every
run. The worker therefore also keeps the metadata unpickled, and the first reader of it in a
process forked from the worker takes that copy as it is: after the fork it is that process's own
(copy-on-write), as a freshly parsed one would be. The copy counts as taken in that process and in
every process it forks, whose readers get an unpickled copy each, as before."""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import pickle
from collections.abc import Callable
from typing import Any

from .. import ansible_state, process

_parsed: dict[bytes, bytes] = {}

#: Parsed routing metadata kept unpickled by the worker, by key, for a process's first reader.
_whole: dict[bytes, Any] = {}

#: Keys of `_whole` taken in this process or one it was forked from.
_taken: set[bytes] = set()


def _key(data: bytes | str) -> bytes:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).digest()


def _cached(data: bytes | str, parse: Callable[[], Any]) -> Any:
    key = _key(data)
    if key in _whole and key not in _taken:
        _taken.add(key)
        return _whole[key]
    kept = _parsed.get(key)
    if kept is None:
        value = parse()
        try:
            _parsed[key] = pickle.dumps(value)
        except (pickle.PicklingError, TypeError, AttributeError):
            return value
        return value
    return pickle.loads(kept)


def install() -> None:
    """Puts the caching readers in place (Ansible anticipates this for the metadata reader: it
    passes a content id "to allow other implementations to cache the output") and fills them with
    what every run reads."""
    from ansible.config import manager
    from ansible.utils.collection_loader import _collection_finder

    original_meta = _collection_finder._meta_yml_to_dict

    def meta_yml_to_dict(yaml_string_data: bytes | str, content_id: Any) -> Any:
        return _cached(yaml_string_data, lambda: original_meta(yaml_string_data, content_id))

    _collection_finder._meta_yml_to_dict = meta_yml_to_dict

    original_read = manager.ConfigManager._read_config_yaml_file

    def read_config_yaml_file(self: Any, yml_file: Any) -> Any:
        try:
            with open(yml_file, "rb") as file:
                data = file.read()
        except OSError:
            return original_read(self, yml_file)
        return _cached(data, lambda: original_read(self, yml_file))

    manager.ConfigManager._read_config_yaml_file = read_config_yaml_file  # type: ignore[method-assign]
    documentation = _cache_documentation()

    def fill() -> None:
        read_config_yaml_file(None, os.path.join(os.path.dirname(manager.__file__), "base.yml"))
        for path in _metadata_files():
            try:
                with open(path, "rb") as file:
                    meta_yml_to_dict(file.read(), None)
            except (OSError, ValueError):
                continue
        if documentation:
            _prefill_documentation()

    def filled() -> dict[bytes, bytes]:
        fill()
        return _parsed

    # Parsing fragments the heap of the process that parses (some 8 MiB): done in a child, whose
    # pickled results (well under 1 MiB) come back.
    parsed = process.computed_in_child(filled)
    if parsed is None:
        fill()
    else:
        _parsed.update(parsed)
    _keep_metadata_whole()


def _keep_metadata_whole() -> None:
    for path in _metadata_files():
        try:
            with open(path, "rb") as file:
                key = _key(file.read())
        except OSError:
            continue
        if key in _parsed:
            _whole[key] = pickle.loads(_parsed[key])


def _cache_documentation() -> bool:
    """Plugin documentation as ansible-core 2.18 reads a plugin's settings: the plugin loader and
    the fragment merger each parse with `AnsibleLoader(text, file_name=path).get_single_data()`;
    both names are replaced by a loader that keeps what it parsed. ansible-core 2.19 parses with
    `yaml.load` and tags every value with its origin and trust: left as it is."""
    from ansible.plugins import loader
    from ansible.utils import plugin_docs

    if not documentation_kept():
        return False
    for module in (loader, plugin_docs):
        module.AnsibleLoader = functools.partial(_DocumentationLoader, module.AnsibleLoader)  # type: ignore[attr-defined]
    return True


def documentation_kept() -> bool:
    """Whether this ansible-core parses plugin documentation into plain values the worker can keep
    (2.18); 2.19 tags every value it parses with its origin and trust."""
    return ansible_state.core_version() < (2, 19)


class _DocumentationLoader:
    """`AnsibleLoader(stream, file_name=..., vault_secrets=...)` for `get_single_data()` alone,
    kept for text without vault secrets."""

    def __init__(self, original: Any, stream: Any, file_name: Any = None, vault_secrets: Any = None) -> None:
        self._parse = lambda: original(stream, file_name=file_name, vault_secrets=vault_secrets).get_single_data()
        self._key = f"{file_name}\0{stream}" if isinstance(stream, str) and vault_secrets is None else None

    def get_single_data(self) -> Any:
        return self._parse() if self._key is None else _cached(self._key, self._parse)


def _prefill_documentation() -> None:
    """Parses, as the plugin loader will in every run, the documentation of the configurable
    plugins the worker imported, and of the builtin fragments it extends."""
    import importlib
    import sys

    from ansible import constants
    from ansible.plugins import loader

    for name, module in list(sys.modules.items()):
        parts = name.split(".")
        path = getattr(module, "__file__", None)
        documentation = getattr(module, "DOCUMENTATION", None)
        if len(parts) != 4 or parts[:2] != ["ansible", "plugins"] or not path or not isinstance(documentation, str):
            continue
        if parts[2] not in constants.CONFIGURABLE_PLUGINS:  # the package of a type is named as the type
            continue
        try:
            doc = loader.AnsibleLoader(documentation, file_name=path).get_single_data()
        except Exception:  # noqa: BLE001 - a run parses it again and reports what is wrong
            continue
        fragments = doc.get("extends_documentation_fragment", []) if isinstance(doc, dict) else []
        for slug in fragments.split(",") if isinstance(fragments, str) else fragments:
            fragment_name, _, var = str(slug).strip().partition(".")
            try:
                fragment = importlib.import_module(f"ansible.plugins.doc_fragments.{fragment_name}")
            except ImportError:
                continue
            text = getattr(fragment.ModuleDocFragment, var.upper() or "DOCUMENTATION", None)
            if isinstance(text, str):
                loader.AnsibleLoader(text, file_name=path).get_single_data()


def _metadata_files() -> list[str]:
    """`ansible.builtin`'s routing metadata and every installed collection's."""
    import ansible
    from ansible import constants

    files = [os.path.join(os.path.dirname(ansible.__file__), "config", "ansible_builtin_runtime.yml")]
    for root in constants.COLLECTIONS_PATHS:
        files.extend(glob.glob(os.path.join(root, "ansible_collections", "*", "*", "meta", "runtime.yml")))
    return files
