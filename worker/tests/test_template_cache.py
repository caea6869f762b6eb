"""A template served from the compiled-template cache renders as a fresh compilation would: through
Ansible's own Templar, after a filter changed how it takes its arguments, and never with a folded
non-deterministic filter frozen into it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import jinja2
import pytest
from jinja2 import pass_context

from ansible_operator_worker import template_cache

#: Template forms a playbook uses, each rendered with VARIABLES.
TEMPLATES = [
    "{{ name | upper }}-{{ items | map('string') | join(',') }}",
    "{{ items | select('odd') | list }}",
    "{{ 'yes' if name is string else 'no' }} {{ items is iterable }} {{ missing is defined }}",
    "{% for i in items %}{{ loop.index }}:{{ i }}{% if not loop.last %}, {% endif %}{% endfor %}",
    "{% macro greet(who, punct='!') %}hi {{ who }}{{ punct }}{% endmacro %}{{ greet(name) }} {{ greet('you', '?') }}",
    "{% set shout %}{{ name }}!{% endset %}{{ shout | length }} {{ shout }}",
    "{% filter upper %}{{ name }} and {{ items | first }}{% endfilter %}",
    "{{ items }}",
    "{{ {'count': items | length, 'name': name, 'ok': items | max > 2} }}",
    "{{ 1 + 2 }}",
    "{{ name | b64encode }} {{ name | default('x') | replace('o', '0') }}",
    "{{ items | to_json }} {{ (items | sum) * 2 }}",
    "{% if name == 'world' %}\n  yes {{ name }}\n{% else %}\n  no\n{% endif %}\n",
    "prefix {{ name }}\n\n",
]

VARIABLES = {"name": "world", "items": [1, 2, 3]}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache, installed, keeping entries in a directory of this test, with counts of its own."""
    template_cache._patch()  # noqa: SLF001 - install() also needs the worker's directory layout
    monkeypatch.setattr(template_cache, "DIRECTORY", str(tmp_path))
    monkeypatch.setattr(template_cache, "COUNTS", template_cache.Counts())
    return tmp_path


def entries(directory: Path) -> list[Path]:
    return [path for path in directory.rglob("*") if path.is_file()]


def render(source: str, variables: dict[str, Any] | None = None) -> Any:
    """`source` templated by a new Ansible Templar, as in a new task fork."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader(), variables=dict(VARIABLES if variables is None else variables))
    try:
        from ansible.template import trust_as_template  # type: ignore[attr-defined]  # 2.19: only trusted strings are templates
    except ImportError:
        return templar.template(source)
    return templar.template(trust_as_template(source))


@pytest.fixture(params=[False, True], ids=["text", "native"])
def jinja2_native(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Ansible 2.18's two environments (2.19 has only the native one and ignores the setting)."""
    from ansible import constants

    monkeypatch.setattr(constants, "DEFAULT_JINJA2_NATIVE", request.param)
    return bool(request.param)


@pytest.mark.parametrize("source", TEMPLATES)
def test_a_template_served_from_the_cache_renders_as_a_fresh_compilation(
    source: str, cache: Path, jinja2_native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_cache, "DIRECTORY", None)
    uncached = render(source)
    monkeypatch.setattr(template_cache, "DIRECTORY", str(cache))

    compiled = render(source)
    assert template_cache.COUNTS.hits == 0
    assert template_cache.COUNTS.kept >= 1, "the template is kept"
    served = render(source)
    assert template_cache.COUNTS.hits >= 1, "the second run is served from the cache"

    assert compiled == uncached
    assert served == uncached
    assert type(served) is type(uncached)


def test_a_second_compilation_is_served_from_the_directory(cache: Path) -> None:
    source = "{{ name | title }} has {{ items | length }} items"
    assert render(source) == "World has 3 items"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.kept) == (0, 1)
    assert len(entries(cache)) == 1
    (entry,) = entries(cache)

    assert render(source) == "World has 3 items"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.kept) == (1, 1)
    assert entries(cache) == [entry]


EXPRESSIONS = [
    "items | length > 2 and name is string",
    "name | upper",
    "items | map('string') | list",
    "{'n': items | sum, 'first': items[0]}",
    "missing is not defined or missing",
]


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_an_expression_served_from_the_cache_evaluates_as_a_fresh_compilation(
    source: str, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ansible 2.19 compiles conditionals and other expressions with `compile_expression`, which
    parses the expression and compiles the tree."""
    monkeypatch.setattr(template_cache, "DIRECTORY", None)
    uncached = evaluate(source)
    monkeypatch.setattr(template_cache, "DIRECTORY", str(cache))

    assert evaluate(source) == uncached
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.kept) == (0, 1)
    assert evaluate(source) == uncached
    assert template_cache.COUNTS.hits == 1


def test_an_expression_and_a_template_of_the_same_text_are_kept_apart(cache: Path) -> None:
    env = jinja2.Environment()
    assert env.from_string("name").render(name="x") == "name"
    assert env.compile_expression("name")(name="x") == "x"
    assert env.from_string("name").render(name="x") == "name"
    assert env.compile_expression("name")(name="x") == "x"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.kept) == (2, 2)


def evaluate(source: str) -> Any:
    """`source` as an expression: through a new Ansible 2.19 Templar, through Jinja2 before it."""
    try:
        from ansible.template import trust_as_template  # type: ignore[attr-defined]
    except ImportError:
        env = jinja2.Environment()
        return env.compile_expression(source)(**VARIABLES)
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    templar = Templar(loader=DataLoader(), variables=dict(VARIABLES))
    return templar.evaluate_expression(trust_as_template(source))


def test_a_filter_that_now_takes_the_context_is_not_served_stale(cache: Path) -> None:
    """The generated code passes the context to a `pass_context` filter and not to a plain one."""
    source = "{{ name | decorate }}"
    plain = jinja2.Environment()
    plain.filters["decorate"] = lambda value: f"<{value}>"
    assert plain.from_string(source).render(name="x") == "<x>"
    assert template_cache.COUNTS.kept == 1

    with_context = jinja2.Environment()
    with_context.filters["decorate"] = pass_context(lambda context, value: f"<{value} of {context['owner']}>")
    assert with_context.from_string(source).render(name="x", owner="y") == "<x of y>"
    assert template_cache.COUNTS.hits == 0

    assert plain.from_string(source).render(name="x") == "<x>"
    assert template_cache.COUNTS.hits == 0, "one entry per source: the last compilation's"


def test_a_filter_missing_when_compiled_is_not_assumed_missing_later(cache: Path) -> None:
    source = "{% if flag %}{{ name | later }}{% else %}none{% endif %}"
    without = jinja2.Environment()
    assert without.from_string(source).render(flag=False, name="x") == "none"

    with_filter = jinja2.Environment()
    with_filter.filters["later"] = lambda value: value * 2
    assert with_filter.from_string(source).render(flag=True, name="x") == "xx"
    assert template_cache.COUNTS.hits == 0


def test_compiler_settings_are_part_of_the_key(cache: Path) -> None:
    source = "{% if true %}\n  x\n{% endif %}\n<<name>>"
    plain = jinja2.Environment()
    trimmed = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    angled = jinja2.Environment(variable_start_string="<<", variable_end_string=">>")
    results = [env.from_string(source).render(name="n") for env in (plain, trimmed, angled)]
    assert results == ["\n  x\n\n<<name>>", "  x\n<<name>>", "\n  x\n\nn"]
    assert template_cache.COUNTS.hits == 0
    assert [env.from_string(source).render(name="n") for env in (plain, trimmed, angled)] == results
    assert template_cache.COUNTS.hits == 3


def test_a_constant_folded_random_is_not_kept(cache: Path) -> None:
    """Ansible 2.18 folds `random` on a constant at compile time (2.19 compiles without folding);
    either way each run draws anew."""
    source = "{{ 1000000000 | random }}"
    drawn = {str(render(source)) for _ in range(4)}
    assert len(drawn) > 1
    if _ansible_folds_constants():
        assert template_cache.COUNTS.compiled == 4
        assert template_cache.COUNTS.kept == 0
        assert entries(cache) == []


def test_a_folded_call_of_any_filter_is_not_kept(cache: Path) -> None:
    env = jinja2.Environment()
    env.filters["draw"] = lambda end: random.randrange(end)
    assert env.optimized
    drawn = {env.from_string("{{ 1000000000 | draw }}").render() for _ in range(4)}
    assert len(drawn) > 1
    assert (template_cache.COUNTS.kept, template_cache.COUNTS.hits) == (0, 0)


def test_a_corrupt_entry_is_compiled_again(cache: Path) -> None:
    source = "{{ items | map('string') | join('+') }}"
    assert render(source) == "1+2+3"
    (entry,) = entries(cache)
    for damage in (b"", b"\x00not marshal", entry.read_bytes()[:20], b"\xe9\x01\x00\x00\x00"):
        entry.write_bytes(damage)
        assert render(source) == "1+2+3"
    assert template_cache.COUNTS.hits == 0
    assert render(source) == "1+2+3"
    assert template_cache.COUNTS.hits == 1, "the entry was written again"


def test_large_sources_and_full_directories_are_not_kept(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = jinja2.Environment()
    large = "{{ x }}" + " " * template_cache.MAX_SOURCE
    assert env.from_string(large).render(x=1).startswith("1 ")
    assert template_cache.COUNTS.kept == 0

    monkeypatch.setattr(template_cache, "MAX_PER_SHARD", 0)
    assert env.from_string("{{ x }}").render(x=1) == "1"
    assert template_cache.COUNTS.kept == 0
    assert entries(cache) == []


def test_raw_compilations_are_left_alone(cache: Path) -> None:
    env = jinja2.Environment()
    generated = env.compile("{{ x }}", raw=True)
    assert isinstance(generated, str)
    assert template_cache.COUNTS.compiled == 0


def _ansible_folds_constants() -> bool:
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar

    try:
        return bool(Templar(loader=DataLoader()).environment.optimized)
    except Exception:  # noqa: BLE001 - 2.19 deprecates the attribute; its environment never folds
        return False
