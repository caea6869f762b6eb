"""Patches: nothing of Ansible's. In a module process it puts a finder first on `sys.meta_path`; in
the zygote it imports module_utils from the worker's own payloads with `sys.modules` set aside.
Knows: ansible-core 2.18 (its payload cache file is the payload's zip); 2.19 keeps a pickle there,
and nothing is stashed from it (its modules import as they come).

Module processes adopt the module_utils the worker imported once. A kubernetes.core module process
imported some sixty module_utils from its payload at every task (`ansible.module_utils.basic`,
`urls`, kubernetes.core's client and service): some 20 to 30 ms of a 55 ms module process on a
two-core machine, more when the machine is busy.

The stash. When the worker keeps a payload it built itself (`payload_cache`), the zygote imports
that payload's module_utils of the families below, from a copy of the payload, with Ansible's own
modules set aside in `sys.modules` (as a module process has them), and keeps the module objects:
every fork shares them. What an import does besides making its module is recorded with it or makes
it unadoptable: the modules it imported or named (its dependencies), names it asked for that were
not there, the environment variables it read, the finders it added to `sys.meta_path` and the
warning filters it added. A module that keeps the copy's path in a global (`__file__` made into a
setting) is not adoptable, nor is one whose import changed anything else of the process (signal
handlers, `atexit`, the environment, `sys.path`, logging): those are put back, and the zygote is
left as it was before the build.

Adoption. In a module process, the first import of a stashed name looks at the payload the module
put first on `sys.path`. A stashed module is adopted when the payload holds the same file (the same
stored bytes, so the same source), the environment variables it read have the values they had,
the names it found missing are missing here too, and its package and every dependency are adopted.
The adopted modules go into `sys.modules` with their file, path, loader and spec pointing into this
payload, as a fresh import would have them; their finders and warning filters are added again; a
package loses the attributes of submodules not adopted. Everything else the module imports from its
payload as it comes. Families: ansible-core's `ansible.module_utils`, and the module_utils of
`kubernetes.core` and `operator_sdk.util` (read for what their imports do besides defining things:
`urllib3.disable_warnings`, `six`'s finder, `distro`'s and `ENABLE_TURBO_MODE`'s environment
reads, all recorded as above). Other collections' module_utils import as they come.
"""

from __future__ import annotations

import ast
import atexit
import base64
import contextlib
import hashlib
import importlib
import importlib.abc
import importlib.machinery
import itertools
import logging
import os
import signal
import socket
import struct
import sys
import tempfile
import warnings
import zipfile
import zipimport
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from .. import process

#: The module_utils stashed, with the packages above them.
FAMILIES = (
    "ansible.module_utils",
    "ansible_collections.kubernetes.core.plugins.module_utils",
    "ansible_collections.operator_sdk.util.plugins.module_utils",
)

#: The top-level packages of modules and their payloads.
_TOPS = ("ansible", "ansible_collections")


@dataclass
class Stashed:
    """A module the zygote imported from a payload of its own, and what its import did."""

    module: ModuleType
    #: The copy of the payload it was imported from.
    archive: str
    #: The payload's file a fresh import of this name runs, and the digest of its stored bytes;
    #: None for a name another module put into `sys.modules` (`six.moves`).
    member: str | None
    digest: str | None
    #: Names it needs as they were made: imported while it ran, or named by its imports.
    deps: set[str] = field(default_factory=set)
    #: Payload files that were not there when its imports looked for them.
    absent: set[str] = field(default_factory=set)
    #: Environment variables its import read, with their values then (None: unset).
    env: dict[str, str | None] = field(default_factory=dict)
    #: Finders its import added to `sys.meta_path`; its calls of `warnings.simplefilter` and
    #: `filterwarnings` (numbered in the order of all such calls).
    finders: list[object] = field(default_factory=list)
    filters: list[tuple[int, str, tuple[Any, ...], dict[str, Any]]] = field(default_factory=list)
    #: Its globals that are strings naming the payload it was imported from.
    path_globals: list[str] = field(default_factory=list)
    #: Its package has it as an attribute (an import of it from there sets one).
    bound: bool = False
    adoptable: bool = True


#: What the zygote stashed, by module name.
STASH: dict[str, Stashed] = {}

#: Payloads stashed already (by digest), or found unusable.
_SEEN: set[str] = set()

#: Keys of the worker's kept payloads looked at already (`stash_kept`).
_KEPT_SEEN: set[str] = set()

#: How zipimport compiles a payload's source (`pathname`, `source`) into code.
CompileSource = Callable[[str, bytes], object]

#: Numbers the calls of the warnings filter functions while stashes are built.
_CALLS = itertools.count()


def in_family(name: str) -> bool:
    """`name` is a stashed family's module or one of the packages above them."""
    return any(name == f or name.startswith(f + ".") or f.startswith(name + ".") for f in FAMILIES)


def _ours(name: str) -> bool:
    return name.split(".", 1)[0] in _TOPS


def is_ansible(thing: object) -> bool:
    """`thing` (a finder, a path hook) is Ansible's."""
    module = getattr(thing, "__module__", None) or getattr(type(thing), "__module__", "")
    return str(module).split(".", 1)[0] == "ansible"


def _candidates(name: str) -> tuple[str, str]:
    """The payload files a fresh import of `name` would run: a module's, a package's."""
    path = name.replace(".", "/")
    return f"{path}.py", f"{path}/__init__.py"


# -- Payload files -----------------------------------------------------------------------------

_LOCAL_HEADER = struct.Struct("<4s5H3L2H")


def members(archive: str) -> dict[str, str]:
    """Each file of a zip archive, with the digest of its stored bytes (method, CRC, size and the
    compressed data: the same source zipped by the same Python gives the same)."""
    with open(archive, "rb") as file:
        data = file.read()
    with zipfile.ZipFile(archive) as zipped:
        infos = zipped.infolist()
    digests = {}
    for info in infos:
        offset = info.header_offset
        header = _LOCAL_HEADER.unpack_from(data, offset)
        if header[0] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"no local header for {info.filename}")
        start = offset + _LOCAL_HEADER.size + header[9] + header[10]
        stored = data[start : start + info.compress_size]
        meta = f"{info.compress_type}:{info.CRC}:{info.file_size}:".encode()
        digests[info.filename] = hashlib.sha256(meta + stored).hexdigest()
    return digests


# -- The stash, in the zygote ------------------------------------------------------------------


def stash_kept(compile_source: CompileSource | None = None) -> int:
    """In the zygote: stashes the module_utils of every payload the worker keeps and has not
    stashed yet (their sources compiled by `compile_source`, the code the worker keeps); how many
    modules were added."""
    from . import payload_cache

    added = 0
    for key, (_, payload, _, _) in list(payload_cache.STORE.entries.items()):
        # A kept payload never changes under its key: each is looked at once.
        if key not in _KEPT_SEEN:
            _KEPT_SEEN.add(key)
            added += stash(payload, compile_source)
    return added


def stash(payload: bytes, compile_source: CompileSource | None = None) -> int:
    """Imports the module_utils of the families in `payload` (a zip Ansible built, as its payload
    cache keeps it) that are not stashed yet, beside the ones stashed already; how many modules
    were added."""
    digest = hashlib.sha256(payload).hexdigest()
    if digest in _SEEN:
        return 0
    _SEEN.add(digest)
    if payload.startswith(b"UEsDB"):  # ansible-core 2.18 keeps the zip in base64
        try:
            payload = base64.b64decode(payload, validate=True)
        except ValueError:
            return 0
    if not payload.startswith(b"PK\x03\x04"):
        return 0
    with tempfile.TemporaryDirectory(prefix="ansible-operator-stash-") as directory:
        archive = os.path.join(directory, "payload.zip")
        with open(archive, "wb") as file:
            file.write(payload)
        try:
            files = members(archive)
        except (OSError, zipfile.BadZipFile, struct.error):
            return 0
        wanted = [name for name in _names(files) if in_family(name)]
        # A name stashed from another payload with other source: this payload is not stashed.
        if any(name in STASH and STASH[name].digest != files.get(STASH[name].member or "") for name in wanted):
            return 0
        build = _Build(archive, files, adoptable(files, os.environ), compile_source)
        with build.isolated():
            for name in wanted:
                if name not in sys.modules:
                    # One that fails is not stashed, nor are the ones that need it.
                    with contextlib.suppress(Exception, SystemExit):
                        importlib.import_module(name)
        return build.keep(directory)


def _names(files: Mapping[str, str]) -> list[str]:
    """The modules of a payload's files, in the payload's order."""
    names = []
    for member in files:
        if not member.endswith(".py") or "/" not in member:
            continue
        name = member[: -len(".py")].replace("/", ".")
        names.append(name.removesuffix(".__init__"))
    return names


class _Build:
    """One stash build: the payload's copy, and what each import did while it ran."""

    def __init__(
        self, archive: str, files: dict[str, str], reused: set[str], compile_source: CompileSource | None
    ) -> None:
        self.archive, self.files, self.reused = archive, files, reused
        self.compile_source = compile_source
        self.records: dict[str, Stashed] = {}
        #: The modules of ours in `sys.modules` once the build is over (an import that failed left none).
        self.loaded: set[str] = set()
        #: Modules whose import is under way, outermost first.
        self.running: list[str] = []
        self.clean = True

    @contextlib.contextmanager
    def isolated(self) -> Iterator[None]:
        """Ansible's modules set aside (the ones stashed and adoptable with this payload adopted in
        their place), the payload first on the path, imports recorded; all of it put back after,
        and the build found unclean when an import changed anything else of the process."""
        saved_modules = {name: sys.modules.pop(name) for name in [n for n in sys.modules if _ours(n)]}
        saved = (sys.meta_path[:], sys.path_hooks[:], dict(sys.path_importer_cache), sys.path[:])
        saved_filters, saved_environ = warnings.filters[:], os.environ
        saved_warn = (warnings.simplefilter, warnings.filterwarnings)
        before = _process_state()
        sys.meta_path[:] = [_Recorder(self), *(f for f in saved[0] if not is_ansible(f))]
        sys.path_hooks[:] = [h for h in saved[1] if not is_ansible(h)]
        sys.path_importer_cache.clear()
        sys.path[:] = [self.archive, *process.BASE_SYS_PATH]
        adopt(self.reused, self.archive)
        during = (sys.path[:], sys.path_hooks[:])
        os.environ = _ReadEnviron(self, saved_environ)
        warnings.simplefilter, warnings.filterwarnings = (self.warned(f) for f in saved_warn)
        saved_compile = zipimport._compile_source  # type: ignore[attr-defined]
        zipimport._compile_source = self.compile_source or saved_compile  # type: ignore[attr-defined]
        try:
            yield
        finally:
            zipimport._compile_source = saved_compile  # type: ignore[attr-defined]
            warnings.simplefilter, warnings.filterwarnings = saved_warn
            os.environ = saved_environ
            self.clean = (sys.path, sys.path_hooks) == during
            for name in [n for n in sys.modules if _ours(n)]:
                module = sys.modules.pop(name)
                if name in self.reused:
                    continue
                if name not in self.records:
                    self.records[name] = Stashed(module, self.archive, None, None)
                self.records[name].module = module
                self.loaded.add(name)
            sys.modules.update(saved_modules)
            sys.meta_path[:], sys.path_hooks[:] = saved[0], saved[1]
            sys.path_importer_cache.clear()
            sys.path_importer_cache.update(saved[2])
            sys.path[:] = saved[3]
            warnings.filters[:] = saved_filters
            warnings._filters_mutated()  # type: ignore[attr-defined]
            self.clean = self.clean and _process_state() == before

    def record(self, name: str) -> Stashed:
        """What is known of `name`'s import so far (its payload file and digest from the start)."""
        if name not in self.records:
            member = next((m for m in _candidates(name) if m in self.files), None)
            digest = self.files.get(member) if member else None
            self.records[name] = Stashed(ModuleType(name), self.archive, member, digest)
        return self.records[name]

    def read_env(self, key: str, value: str | None) -> None:
        """The modules running read variable `key` and found `value` (None: unset)."""
        for name in self.running:
            self.record(name).env.setdefault(key, value)

    def needs(self, name: str) -> None:
        """The modules running need `name` as it is (or as it is missing)."""
        for running in self.running:
            if running != name:
                self.record(running).deps.add(name)

    def missing(self, name: str) -> None:
        """The modules running looked for `name`, and the payload has no file for it."""
        for running in self.running:
            self.record(running).absent.update(_candidates(name))

    def warned(self, function: Any) -> Any:
        """`warnings.simplefilter` or `filterwarnings`, each call recorded for the modules running."""

        def recorded(*args: Any, **kwargs: Any) -> Any:
            number = next(_CALLS)
            for name in self.running:
                self.record(name).filters.append((number, function.__name__, args, kwargs))
            return function(*args, **kwargs)

        return recorded

    def keep(self, directory: str) -> int:
        """Adds this build's modules to the stash; how many. None is added when one of them is
        stashed already (not adoptable with this payload, so the others were bound to another)."""
        records = {name: record for name, record in self.records.items() if name in self.loaded}
        if any(name in STASH for name in records):
            return 0
        for name, record in records.items():
            module = record.module
            if module.__name__ != name and module.__name__ in records:
                record.deps.add(module.__name__)  # put into `sys.modules` under another name
            if record.member is None:
                owner = name.rpartition(".")[0]
                while owner and (owner not in records or records[owner].member is None):
                    owner = owner.rpartition(".")[0]
                if owner:
                    record.deps.add(owner)
            elif module.__name__ == name:
                self._imports(record)
            parent, _, leaf = name.rpartition(".")
            holder = records.get(parent) or STASH.get(parent)
            record.bound = holder is not None and getattr(holder.module, leaf, None) is module
            paths = _path_globals(module, directory)
            record.path_globals = paths or []
            record.adoptable = self.clean and paths is not None
            STASH[name] = record
        return len(records)


    def _imports(self, record: Stashed) -> None:
        """Adds the modules its import statements name (wherever they are in its source) to its
        dependencies; the ones the payload does not have, to what it found missing."""
        assert record.member is not None
        with zipfile.ZipFile(self.archive) as zipped:
            tree = ast.parse(zipped.read(record.member))
        package = record.module.__name__ if record.member.endswith("/__init__.py") else record.module.__name__.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
                named = [base, *(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")]
            else:
                continue
            for name in named:
                if not _ours(name) or name == record.module.__name__:
                    continue
                if name in self.records or name in self.reused:
                    record.deps.add(name)
                elif not any(m in self.files for m in _candidates(name)):
                    # A module the payload lacks, or a name imported from a module: a payload
                    # that has a file for it imports that instead.
                    record.absent.update(_candidates(name))


class _Recorder(importlib.abc.MetaPathFinder):
    """First on `sys.meta_path` while a stash is built: a module outside the families is not
    imported (the modules importing it are not adoptable); each import of a family's module is
    recorded as it runs."""

    def __init__(self, build: _Build) -> None:
        self.build = build

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        build = self.build
        if not _ours(fullname):
            return None
        build.needs(fullname)
        if not in_family(fullname):
            raise ImportError(f"{fullname} is not stashed", name=fullname)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            build.missing(fullname)
            return spec
        build.record(fullname)
        spec.loader = _RecordingLoader(spec.loader, build, fullname)
        return spec


class _RecordingLoader(importlib.abc.Loader):
    """A module's loader, with what its import does recorded."""

    def __init__(self, loader: Any, build: _Build, name: str) -> None:
        self.loader, self.build, self.name = loader, build, name

    def __getattr__(self, name: str) -> Any:
        return getattr(self.loader, name)

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        build, record = self.build, self.build.record(self.name)
        finders = sys.meta_path[:]
        build.running.append(self.name)
        try:
            self.loader.exec_module(module)
        finally:
            build.running.pop()
            record.finders.extend(f for f in sys.meta_path if not any(f is g for g in finders))


class _ReadEnviron(os._Environ):  # type: ignore[misc,name-defined,type-arg]
    """`os.environ` while a stash is built: the same variables, each read recorded."""

    def __init__(self, build: _Build, environ: Any) -> None:
        super().__init__(environ._data, environ.encodekey, environ.decodekey, environ.encodevalue, environ.decodevalue)
        self._build = build

    def __getitem__(self, key: str) -> str:
        try:
            value = super().__getitem__(key)
        except KeyError:
            self._build.read_env(key, None)
            raise
        self._build.read_env(key, value)
        return value

    def __iter__(self) -> Iterator[str]:
        self._build.read_env("\0all", "\0")  # a value no variable has: reading them all is not adopted
        return super().__iter__()


def _process_state() -> tuple[Any, ...]:
    """What of the process an import may change and a stash build cannot record."""
    handlers = []
    for number in signal.valid_signals():
        with contextlib.suppress(ValueError, OSError):
            handlers.append(signal.getsignal(number))
    root = logging.getLogger()
    return (
        atexit._ncallbacks(),  # type: ignore[attr-defined]
        tuple(handlers),
        sys.excepthook,
        sys.displayhook,
        tuple(root.handlers),
        root.level,
        socket.getdefaulttimeout(),
        os.getcwd(),
        dict(os.environ),
        tuple(sys.path_hooks),
        sys.stdin,
        sys.stdout,
        sys.stderr,
    )


def _path_globals(module: ModuleType, directory: str) -> list[str] | None:
    """The module's globals (other than its own file and path) that are strings naming its copy
    (a traceback kept from a failed import); None when another kind of global names it (`__file__`
    made into a `Path`, a list of paths)."""

    def names(value: Any, depth: int = 0) -> bool:
        if isinstance(value, (str, bytes, os.PathLike)):
            return directory in os.fsdecode(value)
        if depth == 0 and isinstance(value, (list, tuple, set, frozenset)):
            return any(names(v, 1) for v in value)
        if depth == 0 and isinstance(value, dict):
            return any(names(v, 1) for v in value.values())
        return False

    found = []
    for key, value in vars(module).items():
        if key in {"__file__", "__cached__", "__path__", "__spec__", "__loader__"} or not names(value):
            continue
        if not isinstance(value, str):
            return None
        found.append(key)
    return found


# -- Adoption, in a module process -------------------------------------------------------------


def adoptable(files: Mapping[str, str], environ: Mapping[str, str]) -> set[str]:
    """The stashed modules a module process whose payload has `files` (file: digest) and whose
    environment is `environ` adopts."""
    names = set()
    for name, stashed in STASH.items():
        if not stashed.adoptable:
            continue
        if stashed.member is not None and files.get(stashed.member) != stashed.digest:
            continue
        if any(environ.get(key) != value for key, value in stashed.env.items()):
            continue
        if any(member in files for member in stashed.absent):
            continue
        names.add(name)
    while True:
        dropped = {
            name
            for name in names
            if not STASH[name].deps <= names or ("." in name and name.rpartition(".")[0] not in names)
        }
        if not dropped:
            return names
        names -= dropped


def _replayed_finders(names: set[str]) -> list[object]:
    finders: list[object] = []
    for name in names:
        for finder in STASH[name].finders:
            if not any(finder is f for f in finders):
                finders.append(finder)
    return finders


class _Adopter(importlib.abc.MetaPathFinder):
    """First on `sys.meta_path` in a module process: at the first import of a stashed name, adopts
    what the module's payload allows."""

    def __init__(self) -> None:
        self.decided = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if self.decided or fullname not in STASH:
            return None
        self.decided = True
        archive = next((p for p in sys.path if os.path.isfile(p)), None)
        if archive is None:
            return None
        try:
            names = adoptable(members(archive), os.environ)
        except (OSError, zipfile.BadZipFile, struct.error):
            return None
        adopt(names, archive)
        if fullname not in names:
            return None
        # The import that asked puts it into `sys.modules` itself, from this spec.
        module = sys.modules.pop(fullname)
        return importlib.machinery.ModuleSpec(fullname, _Adopted(module), is_package=hasattr(module, "__path__"))


class _Adopted(importlib.abc.Loader):
    """Gives the import an adopted module as it is, with its own spec and loader."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.spec, self.loader = module.__spec__, module.__loader__  # type: ignore[attr-defined]

    def create_module(self, spec: Any) -> ModuleType:
        return self.module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__, module.__loader__ = self.spec, self.loader


def adopt(names: set[str], archive: str) -> None:
    """Puts the stashed modules `names` into `sys.modules`, their files in `archive`, as their
    import from there would have left them: each bound to its package as it was, a package without
    the submodules not adopted, their finders and warning filters added."""
    importers: dict[str, zipimport.zipimporter] = {}
    for name in sorted(names):
        stashed = STASH[name]
        if stashed.member is not None and stashed.module.__name__ == name:
            _relocate(stashed, archive, importers)
        sys.modules[name] = stashed.module
    stashed_ids = {id(s.module) for s in STASH.values()}
    adopted_ids = {id(STASH[name].module) for name in names}
    for name in names:
        module = STASH[name].module
        if hasattr(module, "__path__") and module.__name__ == name:
            for attribute, value in list(vars(module).items()):
                if id(value) in stashed_ids and id(value) not in adopted_ids:
                    delattr(module, attribute)
    for name in names:
        parent, _, leaf = name.rpartition(".")
        if STASH[name].bound and parent in names:
            setattr(STASH[parent].module, leaf, STASH[name].module)
    sys.meta_path.extend(f for f in _replayed_finders(names) if not any(f is g for g in sys.meta_path))
    calls = {call[0]: call for name in names for call in STASH[name].filters}
    for _, function, args, kwargs in (calls[n] for n in sorted(calls)):
        getattr(warnings, function)(*args, **kwargs)


def _relocate(stashed: Stashed, archive: str, importers: dict[str, zipimport.zipimporter]) -> None:
    """Points a stashed module's file, path, loader and spec into `archive`, as its import from
    there would have them."""
    module, old = stashed.module, stashed.archive

    def moved(path: str) -> str:
        return archive + path[len(old) :] if path.startswith(old) else path

    assert stashed.member is not None
    origin = f"{archive}{os.sep}{stashed.member}"
    package = stashed.member.endswith("/__init__.py")
    # Found by the importer of the directory it is in (a package: the directory above its own).
    directory = os.path.dirname(os.path.dirname(stashed.member) if package else stashed.member)
    if directory not in importers:
        importers[directory] = zipimport.zipimporter(os.path.join(archive, directory) if directory else archive)
    loader = importers[directory]
    spec = importlib.machinery.ModuleSpec(module.__name__, loader, origin=origin, is_package=package)
    spec.has_location = True
    if package:
        spec.submodule_search_locations = [os.path.dirname(origin)]
        module.__path__ = [moved(p) for p in module.__path__]
    module.__file__ = origin
    if isinstance(getattr(module, "__cached__", None), str):
        module.__cached__ = moved(module.__cached__)
    for key in stashed.path_globals:
        setattr(module, key, getattr(module, key).replace(old, archive))
    module.__loader__, module.__spec__ = loader, spec
    stashed.archive = archive


def install() -> None:
    """In a module process, with Ansible's own modules unloaded: adopts stashed modules at the
    first import of one."""
    if STASH:
        sys.meta_path.insert(0, _Adopter())
