"""Compiled Jinja2 templates kept across task forks and runs. Ansible 2.18 calls
`Environment.from_string` for every templating, and Jinja2 keeps no cache for strings: each task
fork parses the same task arguments, generates Python source from them and `compile()`s it again,
more than half of the fork's time. The same source compiled by the same compiler settings gives the
same code, so the code object is kept on disk (marshalled) by the hash of the source and of
everything the compiler reads; task forks are grandchildren of the zygote and share it through that
directory only. Ansible 2.19 compiles conditionals with `compile_expression`, which parses the
expression and compiles the tree: those are kept by the expression's source.

A kept template behaves as a fresh compilation, because:
- the key holds the environment's class and code generator, its delimiters, whitespace and newline
  settings, extensions, `optimized`, `is_async`, `autoescape`, the finalize function and its
  pass-argument kind, and `compile`'s `name`, `filename` and `defer_init` (and what Ansible 2.19's
  compiler reads outside the environment: `_ambient_state`);
- the generated code depends on how each filter and test it names takes its arguments (Jinja2's
  `pass_context` and kin) and on whether it exists: those are kept with the code, and the code is
  used only while the current environment gives every one of them the same;
- a compilation during which a filter or test ran on constants (Jinja2's constant folding) is not
  kept, since its result is baked into the code (`{{ 100 | random }}` would always give the same);
- `raw` compilations, sources that are not strings and a callable `autoescape` are left alone.

Only the operator's user writes the directory (the zygote makes it private to that user), and an
entry's name is the hash of what it was compiled from. A CR's author controls only extra-var values,
which Ansible marks unsafe and never templates, so no template source and no kept code comes from
them.
"""

from __future__ import annotations

import ast
import hashlib
import marshal
import os
import re
import sys
from dataclasses import dataclass
from types import CodeType
from typing import Any

from .files import private_dir, write_atomically

#: Where compiled templates are kept (set by `install`; None: not kept).
DIRECTORY: str | None = None

#: Sources longer than this (in characters) are compiled every time: rare, and not worth the disk.
MAX_SOURCE = 64 * 1024

#: Entries are spread over 256 subdirectories by the first two hex digits of their hash; a
#: subdirectory takes no more entries past this count (8,192 in all), cheap to check on each write.
MAX_PER_SHARD = 32

#: The layout of an entry: `(_FORMAT, dependencies, code)`.
_FORMAT = 1

#: `environment.filters['name']` / `environment.tests['name']` in generated code.
_DEPENDENCY = re.compile(r"""environment\.(filters|tests)\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\]""")

#: The environment's settings the lexer, parser and code generator read.
_SETTINGS = (
    "block_start_string",
    "block_end_string",
    "variable_start_string",
    "variable_end_string",
    "comment_start_string",
    "comment_end_string",
    "line_statement_prefix",
    "line_comment_prefix",
    "trim_blocks",
    "lstrip_blocks",
    "newline_sequence",
    "keep_trailing_newline",
    "optimized",
    "is_async",
    "sandboxed",
)

_SIMPLE = (str, int, float, bool, type(None))


@dataclass
class Counts:
    """What the cache did in this process (for tests and measurements)."""

    #: Compilations served from the directory.
    hits: int = 0
    #: Compilations done by Jinja2 (whether kept or not).
    compiled: int = 0
    #: Compilations written to the directory.
    kept: int = 0


COUNTS = Counts()

#: Filter and test calls made on constants at compile time, in this process.
_folds = 0

#: The source of the expression `compile_expression` is compiling, until it reaches `compile`.
_expression: str | None = None


def install(store: str | None) -> None:
    """Serves Jinja2 compilations from `store` (a directory of this worker) from now on, in this
    process and its forks, in a subdirectory per Ansible, Jinja2 and Python version (marshal's
    format is Python's)."""
    global DIRECTORY
    if store is None:
        return
    import jinja2
    from ansible import __version__

    DIRECTORY = private_dir(os.path.join(store, f"{__version__}-jinja2-{jinja2.__version__}-{sys.implementation.cache_tag}"))
    if DIRECTORY is None:
        return
    _patch()


def _patch() -> None:
    """Wraps `Environment.compile` and `compile_expression`, and the constant folding of filters and
    tests, once."""
    from jinja2 import nodes
    from jinja2.environment import Environment

    if getattr(Environment.compile, "_template_cache", False):
        return
    compile_template = Environment.compile
    compile_expression = Environment.compile_expression
    fold = nodes._FilterTestCommon.as_const

    def as_const(self: Any, eval_ctx: Any = None) -> Any:
        global _folds
        value = fold(self, eval_ctx)
        _folds += 1
        return value

    def expression(self: Any, source: str, undefined_to_none: bool = True) -> Any:
        """Jinja2 parses an expression into a tree and compiles that: noted for `compile`."""
        global _expression
        _expression = source
        try:
            return compile_expression(self, source, undefined_to_none)
        finally:
            _expression = None

    def compile(  # noqa: A001 - Jinja2's name
        self: Any,
        source: Any,
        name: str | None = None,
        filename: str | None = None,
        raw: bool = False,
        defer_init: bool = False,
    ) -> Any:
        global _expression
        expression_source, _expression = _expression, None
        directory = DIRECTORY
        if directory is None or raw:
            return compile_template(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            key = _key(self, "template", source, name, filename, defer_init)
        elif expression_source is not None and _is_expression(source):
            key = _key(self, "expression", expression_source, name, filename, defer_init)
        else:
            key = None
        if key is None:
            return compile_template(self, source, name, filename, raw, defer_init)
        path = os.path.join(directory, key[:2], key[2:])
        code = _load(path, self)
        if code is not None:
            COUNTS.hits += 1
            return code
        folds = _folds
        # Jinja2's own compile, in two steps, to see the generated source.
        generated = compile_template(self, source, name, filename, True, defer_init)
        code = self._compile(generated, "<template>" if filename is None else filename)
        COUNTS.compiled += 1
        if _folds == folds and _store(path, _dependencies(self, generated), code):
            COUNTS.kept += 1
        return code

    compile._template_cache = True  # type: ignore[attr-defined]
    nodes._FilterTestCommon.as_const = as_const  # type: ignore[method-assign]
    Environment.compile_expression = expression  # type: ignore[method-assign]
    Environment.compile = compile  # type: ignore[assignment]


def _is_expression(tree: Any) -> bool:
    """`tree` is what `compile_expression` builds around the expression it parsed: `result = ...`."""
    from jinja2 import nodes

    if not isinstance(tree, nodes.Template) or len(tree.body) != 1:
        return False
    (assign,) = tree.body
    return isinstance(assign, nodes.Assign) and isinstance(assign.target, nodes.Name) and assign.target.name == "result"


def _key(env: Any, kind: str, source: str, name: str | None, filename: str | None, defer_init: bool) -> str | None:
    """The hash of `source` (a template or an expression: `kind`) and of everything compiling it
    reads; None when it must not be kept."""
    if len(source) > MAX_SOURCE:
        return None
    if callable(env.autoescape):
        return None
    ambient = _ambient_state(env)
    if ambient is None:
        return None
    finalize = env.finalize
    settings = (
        _FORMAT,
        kind,
        _qualified(type(env)),
        _qualified(env.code_generator_class),
        tuple(getattr(env, setting) for setting in _SETTINGS),
        # Settings an extension adds (i18n's `newstyle_gettext`) and any other plain one.
        tuple(sorted((k, v) for k, v in vars(env).items() if k not in _SETTINGS and isinstance(v, _SIMPLE))),
        tuple(sorted((identifier, _qualified(type(ext))) for identifier, ext in env.extensions.items())),
        tuple(sorted(getattr(env, "intercepted_binops", ()))),
        tuple(sorted(getattr(env, "intercepted_unops", ()))),
        bool(env.autoescape),
        None if finalize is None else (_pass_arg(finalize), _qualified(finalize)),
        ambient,
        name,
        filename,
        defer_init,
    )
    digest = hashlib.sha256(repr(settings).encode())
    digest.update(b"\0")
    digest.update(source.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def _ambient_state(env: Any) -> tuple[Any, ...] | None:
    """What Ansible 2.19's compiler reads outside the environment: whether backslashes in string
    constants are escaped (`_TemplateCompileContext`, read by its lexer) and whether constant strings
    may be templates (`ALLOW_EMBEDDED_TEMPLATES`, read by its code generator). None when its template
    debugging is on (it writes the generated source to a file while compiling)."""
    bits = sys.modules.get("ansible._internal._templating._jinja_bits")
    if bits is None:
        return ()
    if getattr(env, "_debuggable_template_source", False):
        return None
    context = bits._TemplateCompileContext.current(optional=True)
    config = sys.modules["ansible._internal._templating._jinja_common"]._TemplateConfig
    return (context is not None and bool(context.escape_backslashes), bool(config.allow_embedded_templates))


def _qualified(thing: Any) -> str:
    return f"{getattr(thing, '__module__', '?')}.{getattr(thing, '__qualname__', type(thing).__qualname__)}"


def _pass_arg(func: Any) -> str:
    """How Jinja2 calls `func`: with the context, eval context, environment, or plainly."""
    from jinja2.utils import _PassArg

    marker = _PassArg.from_obj(func)
    return "plain" if marker is None else marker.name


def _marker(env: Any, kind: str, name: str) -> str:
    """What the generated code assumed of filter or test `name`: missing, or its pass-argument kind."""
    try:
        func = getattr(env, kind).get(name)
    except Exception:  # noqa: BLE001 - Ansible's plugin mappings raise their own errors for unknown names
        return "missing"
    return "missing" if func is None else _pass_arg(func)


def _dependencies(env: Any, generated: str) -> tuple[tuple[str, str, str], ...]:
    """The filters and tests `generated` looks up, each with what it is now in `env`."""
    names = {(match[1], ast.literal_eval(match[2])) for match in _DEPENDENCY.finditer(generated)}
    return tuple((kind, name, _marker(env, kind, name)) for kind, name in sorted(names))


def _load(path: str, env: Any) -> CodeType | None:
    """The code kept in `path`, if it is there, whole, and its filters and tests are still as they
    were when it was compiled."""
    try:
        with open(path, "rb") as file:
            entry = marshal.loads(file.read())
        version, dependencies, code = entry
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if version != _FORMAT or not isinstance(code, CodeType) or not isinstance(dependencies, tuple):
        return None
    for dependency in dependencies:
        if not isinstance(dependency, tuple) or len(dependency) != 3:
            return None
        kind, name, marker = dependency
        if kind not in ("filters", "tests") or _marker(env, kind, name) != marker:
            return None
    return code


def _store(path: str, dependencies: tuple[tuple[str, str, str], ...], code: CodeType) -> bool:
    """Keeps `code` in `path` unless its subdirectory is full."""
    shard = os.path.dirname(path)
    try:
        os.makedirs(shard, mode=0o700, exist_ok=True)
        if len(os.listdir(shard)) >= MAX_PER_SHARD:
            return False
    except OSError:
        return False
    return write_atomically(path, marshal.dumps((_FORMAT, dependencies, code)))
