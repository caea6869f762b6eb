"""Patches: Jinja2's `Environment.compile`, `Environment.compile_expression` and
`nodes._FilterTestCommon.as_const`. Knows: ansible-core 2.18 to 2.21 (no version check; what
2.19's compiler reads outside the environment is read when present), Jinja2 3.1.

Compiled Jinja2 templates kept across task forks and runs. Ansible 2.18 calls
`Environment.from_string` for every templating, and Jinja2 keeps no cache for strings: each task
fork parses the same task arguments, generates Python source from them and `compile()`s it again,
more than half of the fork's time. The same source compiled by the same compiler settings gives the
same code, so the worker keeps code objects (`kept`) by the hash of the source and of everything
the compiler reads. A task fork that compiles a template the worker does not have reports its
source and settings; the worker's learner compiles it again in an environment it makes with those
settings, and keeps the code only when its own key for it is the one the run reported. Ansible
2.19 compiles conditionals with `compile_expression`, which parses the expression and compiles the
tree: those are kept by the expression's source.

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

No run writes what is kept: what a run reports only chooses which sources the worker compiles.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import marshal
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from types import CodeType
from typing import Any

from .. import kept

#: Whether compilations are served from the worker's store (set by `install`).
ENABLED = False

#: Sources longer than this (in characters) are compiled every time: rare, and not worth the memory.
MAX_SOURCE = 64 * 1024

#: Compiled templates by key: `(dependencies, code)`.
STORE = kept.Store(max_entries=8192, max_bytes=32 << 20)

#: Part of every key: a change of what an entry holds changes it.
_FORMAT = 2

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

    #: Compilations served from the worker's store.
    hits: int = 0
    #: Compilations done by Jinja2.
    compiled: int = 0
    #: Compilations reported to the worker.
    reported: int = 0


COUNTS = Counts()

#: Filter and test calls made on constants at compile time, in this process.
_folds = 0

#: The source of the expression `compile_expression` is compiling, until it reaches `compile`.
_expression: str | None = None

#: In the learner: the key and entry of the last compilation, instead of a report.
_learning = False
_learned: tuple[str, tuple[Any, CodeType]] | None = None


def install() -> None:
    """Serves Jinja2 compilations from the worker's store from now on, in this process and its
    forks, and has compilations it does not hold reported to it."""
    global ENABLED
    _patch()
    ENABLED = True
    kept.register("template", STORE, _derive)


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
        global _expression, _learned
        expression_source, _expression = _expression, None
        if not ENABLED or raw:
            return compile_template(self, source, name, filename, raw, defer_init)
        if isinstance(source, str):
            kind, text = "template", source
        elif expression_source is not None and _is_expression(source):
            kind, text = "expression", expression_source
        else:
            return compile_template(self, source, name, filename, raw, defer_init)
        key = _key(self, kind, text, name, filename, defer_init)
        if key is None:
            return compile_template(self, source, name, filename, raw, defer_init)
        code = None if _learning else _served(STORE.get(key), self)
        if code is not None:
            COUNTS.hits += 1
            return code
        folds = _folds
        # Jinja2's own compile, in two steps, to see the generated source.
        generated = compile_template(self, source, name, filename, True, defer_init)
        code = self._compile(generated, "<template>" if filename is None else filename)
        COUNTS.compiled += 1
        if _folds != folds:
            return code
        if _learning:
            _learned = (key, (_dependencies(self, generated), code))
        else:
            meta = _report(self, kind, key, name, filename, defer_init)
            kept.report("template", meta, text.encode("utf-8", "surrogatepass"))
            COUNTS.reported += 1
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


def _served(entry: Any, env: Any) -> CodeType | None:
    """The code of a kept entry, if its filters and tests are still as they were when it was
    compiled."""
    if entry is None:
        return None
    dependencies, code = entry
    for kind, name, marker in dependencies:
        if _marker(env, kind, name) != marker:
            return None
    return code


def _report(env: Any, kind: str, key: str, name: str | None, filename: str | None, defer_init: bool) -> dict[str, Any]:
    """What the learner needs besides the source to compile it again: the environment's class,
    its settings, and what Ansible 2.19's compiler reads outside it."""
    return {
        "key": key,
        "kind": kind,
        "name": name,
        "filename": filename,
        "defer_init": defer_init,
        "environment": _qualified(type(env)),
        "settings": {setting: getattr(env, setting) for setting in _SETTINGS if setting != "sandboxed"},
        "escape_backslashes": _escape_backslashes(),
    }


def _derive(meta: dict[str, Any], data: bytes) -> tuple[str, Any, int] | None:
    """In the worker's learner: compiles a reported source again, in an environment of the reported
    class made here with the reported settings. Kept under the key computed here, and only when it
    is the reported one (so the environment is the run's in everything the key holds)."""
    global _learning, _learned
    name, filename, defer_init = meta["name"], meta["filename"], meta["defer_init"]
    if not (_optional_str(name) and _optional_str(filename) and isinstance(defer_init, bool)):
        return None
    source = data.decode("utf-8", "surrogatepass")
    _learning = True
    try:
        env = _environment(meta["environment"], meta["settings"])
        if env is None:
            return None
        _learned = None
        with _compile_context(meta["escape_backslashes"]):
            if meta["kind"] == "template":
                env.compile(source, name, filename, defer_init=defer_init)
            elif meta["kind"] == "expression" and name is None and filename is None and not defer_init:
                env.compile_expression(source)
    finally:
        _learning = False
    learned, _learned = _learned, None
    if learned is None or learned[0] != meta["key"]:
        return None
    return learned[0], learned[1], len(marshal.dumps(learned[1][1]))


def _optional_str(value: Any) -> bool:
    return value is None or isinstance(value, str)


def _environment(qualified: Any, settings: Any) -> Any:
    """A new environment of class `qualified` as a run makes it (Jinja2's own, or one of Ansible's
    as its Templar makes it), with `settings` (those a template's header or the template action
    change); None for another class."""
    if not isinstance(settings, dict) or set(settings) - set(_SETTINGS):
        return None
    import jinja2
    import jinja2.nativetypes

    # Jinja2's own classes: Ansible's settings are templated in one.
    plain = [cls for cls in (jinja2.Environment, jinja2.nativetypes.NativeEnvironment) if _qualified(cls) == qualified]
    if plain:
        env = plain[0]()
    else:
        # Ansible's, as its Templar makes them; 2.18 has a second class, for `jinja2_native`: a
        # copy of the same environment, as the template action makes it (`copy_with_new_env`).
        from ansible import constants

        base = _templar_environment(bool(getattr(constants, "DEFAULT_JINJA2_NATIVE", False)))
        template = sys.modules["ansible.template"]
        names = ("AnsibleEnvironment", "AnsibleNativeEnvironment")
        classes = [type(base)] + [getattr(template, name, None) for name in names]
        wanted = [cls for cls in classes if cls is not None and _qualified(cls) == qualified]
        if not wanted:
            return None
        env = object.__new__(wanted[0])
        env.__dict__.update(base.__dict__)
    for setting, value in settings.items():
        if not isinstance(value, _SIMPLE):
            return None
        setattr(env, setting, value)
    return env


@functools.cache
def _templar_environment(native: bool) -> Any:
    """The environment of a new Templar, with Ansible's `jinja2_native` setting as given (made once
    in a learner, copied for each report)."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    return Templar(loader=DataLoader()).environment


def _escape_backslashes() -> bool | None:
    """Ansible 2.19's compile context (whether backslashes in string constants are escaped); None
    before 2.19 or outside one."""
    bits = sys.modules.get("ansible._internal._templating._jinja_bits")
    if bits is None:
        return None
    context = bits._TemplateCompileContext.current(optional=True)
    return None if context is None else bool(context.escape_backslashes)


@contextlib.contextmanager
def _compile_context(escape_backslashes: Any) -> Iterator[None]:
    """Ansible 2.19's compile context as a run had it."""
    if escape_backslashes is None:
        yield
        return
    bits = sys.modules["ansible._internal._templating._jinja_bits"]
    with bits._TemplateCompileContext(escape_backslashes=bool(escape_backslashes)):
        yield
