"""Patches: the import of `kubernetes.client`, `kubernetes.client.models` and
`kubernetes.client.api` (a finder first on `sys.meta_path`). Knows: no ansible-core code (any
version); kubernetes 33 (the 2.18 toolchain's); kubernetes 35 and later (37 in the 2.19 toolchain)
are lazy on their own and are left as they are.

The kubernetes client, imported by the worker without the classes no run uses. The packages
`kubernetes.client`, `kubernetes.client.models` and `kubernetes.client.api` import every generated
model and API class in their `__init__` (some 700 modules, about 26 MiB of the worker's memory),
while the dynamic client that kubernetes.core's modules use works on plain JSON and names a model
only to deserialize a typed answer. Here those three packages run their own source with each
`from kubernetes.client.models.<module> import <Class>` (and `.api.`) line left out and the name
noted instead: the module is imported when the name is first used (PEP 562 `__getattr__`, which
`from ... import`, `getattr` and `*` imports go through), in the process that uses it, and is then
an ordinary attribute. Every other line runs as written, and the names the packages offer are the
same ones."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import re
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

#: The packages whose imports of generated classes wait until a class is used.
PACKAGES = frozenset({"kubernetes.client", "kubernetes.client.models", "kubernetes.client.api"})

#: One generated class imported from its own module, as those `__init__` files do it.
_IMPORT = re.compile(r"^from (kubernetes\.client\.(?:models|api)\.\w+) import (\w+)\s*$")


def install() -> None:
    """Imports of the three packages from now on (in this process and its forks) are lazy. Before
    anything imports `kubernetes`."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def split(source: str) -> tuple[str, dict[str, str]]:
    """`source` with each import of one generated class blanked (line numbers stay), and the
    classes so left out, by name, with the module each comes from."""
    lazy: dict[str, str] = {}
    lines = []
    for line in source.splitlines():
        match = _IMPORT.match(line)
        if match:
            lazy[match[2]] = match[1]
            line = ""
        lines.append(line)
    return "\n".join(lines), lazy


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in PACKAGES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


class _Loader(importlib.abc.Loader):
    def __init__(self, original: importlib.machinery.SourceFileLoader) -> None:
        self._original = original

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        source, lazy = split(self._original.get_source(module.__name__) or "")
        origin = module.__spec__.origin if module.__spec__ else None
        exec(compile(source, origin or module.__name__, "exec"), module.__dict__)  # noqa: S102 - the package's own source
        if lazy:  # newer clients (kubernetes 35 and later) are lazy on their own: left as they are
            _make_lazy(module, lazy)


def _make_lazy(module: ModuleType, lazy: dict[str, str]) -> None:
    # The submodules, which importing a class from one makes attributes of the package.
    submodules = {
        child: target for target in lazy.values() for parent, _, child in [target.rpartition(".")] if parent == module.__name__
    }

    def __getattr__(name: str) -> Any:
        if name in lazy:
            value = getattr(importlib.import_module(lazy[name]), name)
        elif name in submodules:
            value = importlib.import_module(submodules[name])
        else:
            raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")
        setattr(module, name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(module.__dict__) | set(lazy) | set(submodules))

    public = {name for name in module.__dict__ if not name.startswith("_")}
    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__dir__ = __dir__  # type: ignore[method-assign]
    module.__all__ = sorted(public | set(lazy) | set(submodules))
