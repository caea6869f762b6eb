"""YAML that every run parses the same way, parsed once by the zygote: Ansible's setting definitions
(`config/base.yml`, read whenever the settings are read) and collections' routing metadata
(`meta/runtime.yml`; the one of `ansible.builtin` alone is some 7,000 lines). Results are kept by the
hash of the bytes parsed, so a file that changes is parsed anew, and every caller gets its own copy
(unpickled), so nothing a run does to it reaches another run."""

from __future__ import annotations

import glob
import hashlib
import os
import pickle
from collections.abc import Callable
from typing import Any

_parsed: dict[bytes, bytes] = {}


def _key(data: bytes | str) -> bytes:
    return hashlib.sha256(data if isinstance(data, bytes) else data.encode()).digest()


def _cached(data: bytes | str, parse: Callable[[], Any]) -> Any:
    key = _key(data)
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

    read_config_yaml_file(None, os.path.join(os.path.dirname(manager.__file__), "base.yml"))
    for path in _metadata_files():
        try:
            with open(path, "rb") as file:
                meta_yml_to_dict(file.read(), None)
        except (OSError, ValueError):
            continue


def _metadata_files() -> list[str]:
    """`ansible.builtin`'s routing metadata and every installed collection's."""
    import ansible
    from ansible import constants

    files = [os.path.join(os.path.dirname(ansible.__file__), "config", "ansible_builtin_runtime.yml")]
    for root in constants.COLLECTIONS_PATHS:
        files.extend(glob.glob(os.path.join(root, "ansible_collections", "*", "*", "meta", "runtime.yml")))
    return files
