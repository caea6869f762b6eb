"""A template served from the compiled-template cache renders as a fresh compilation would: through
Ansible's own Templar, after a filter changed how it takes its arguments, and never with a folded
non-deterministic filter frozen into it. What is kept is compiled by the worker's learner from what
a run reported, and only under the key the learner computes itself."""

from __future__ import annotations

import random
from typing import Any

import jinja2
import pytest
from jinja2 import pass_context

from ansible_operator_worker import kept
from ansible_operator_worker.speedups import template_cache

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


class Learner:
    """The worker's side, in this process: each report is compiled again as the learner does, and
    kept. A report from an environment of plain Jinja2 with filters of its own (which the learner
    does not make) is compiled in that environment."""

    def __init__(self) -> None:
        self.store = kept.Store(max_entries=100, max_bytes=1 << 20)
        self.environments: dict[str, Any] = {}
        #: Reports the learner compiled in an environment it made itself.
        self.made_here = 0
        self.last_meta: dict[str, Any] = {}

    def report(self, kind: str, meta: dict[str, Any], data: bytes) -> None:
        assert kind == "template"
        self.last_meta = meta
        try:
            derived = template_cache._derive(meta, data)  # noqa: SLF001
        except Exception:  # noqa: BLE001 - as the learner: not kept (a filter the worker lacks)
            derived = None
        if derived is not None:
            self.made_here += 1
        else:
            environment = self.environments[meta["key"]]
            original = template_cache._environment  # noqa: SLF001
            template_cache._environment = lambda *_: environment  # type: ignore[assignment]  # noqa: SLF001
            try:
                derived = template_cache._derive(meta, data)  # noqa: SLF001
            finally:
                template_cache._environment = original  # type: ignore[assignment]  # noqa: SLF001
        if derived is not None:
            self.store.put(*derived)


@pytest.fixture
def learner(monkeypatch: pytest.MonkeyPatch) -> Learner:
    """The cache, installed, keeping entries in a store of this test, with counts of its own."""
    learner = Learner()
    template_cache._patch()  # noqa: SLF001 - install() also registers the kind with the worker
    monkeypatch.setattr(template_cache, "ENABLED", True)
    monkeypatch.setattr(template_cache, "STORE", learner.store)
    monkeypatch.setattr(template_cache, "COUNTS", template_cache.Counts())
    monkeypatch.setattr(kept, "report", learner.report)
    report = template_cache._report  # noqa: SLF001

    def noting_the_environment(env: Any, *args: Any) -> dict[str, Any]:
        meta = report(env, *args)
        learner.environments[meta["key"]] = env
        return meta

    monkeypatch.setattr(template_cache, "_report", noting_the_environment)
    return learner


def entries(learner: Learner) -> list[str]:
    return list(learner.store.entries)


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
    source: str, learner: Learner, jinja2_native: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(template_cache, "ENABLED", False)
    uncached = render(source)
    monkeypatch.setattr(template_cache, "ENABLED", True)

    compiled = render(source)
    assert template_cache.COUNTS.hits == 0
    assert template_cache.COUNTS.reported >= 1, "the template is reported"
    assert learner.made_here >= 1, "the worker compiles it again in an environment it makes"
    served = render(source)
    assert template_cache.COUNTS.hits >= 1, "the second run is served from the cache"

    assert compiled == uncached
    assert served == uncached
    assert type(served) is type(uncached)


def test_a_second_compilation_is_served_from_what_the_worker_compiled(learner: Learner) -> None:
    source = "{{ name | title }} has {{ items | length }} items"
    assert render(source) == "World has 3 items"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.reported) == (0, 1)
    assert learner.made_here == 1
    (entry,) = entries(learner)

    assert render(source) == "World has 3 items"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.reported) == (1, 1)
    assert entries(learner) == [entry]


EXPRESSIONS = [
    "items | length > 2 and name is string",
    "name | upper",
    "items | map('string') | list",
    "{'n': items | sum, 'first': items[0]}",
    "missing is not defined or missing",
]


@pytest.mark.parametrize("source", EXPRESSIONS)
def test_an_expression_served_from_the_cache_evaluates_as_a_fresh_compilation(
    source: str, learner: Learner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ansible 2.19 compiles conditionals and other expressions with `compile_expression`, which
    parses the expression and compiles the tree."""
    monkeypatch.setattr(template_cache, "ENABLED", False)
    uncached = evaluate(source)
    monkeypatch.setattr(template_cache, "ENABLED", True)

    assert evaluate(source) == uncached
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.reported) == (0, 1)
    assert learner.made_here == 1
    assert evaluate(source) == uncached
    assert template_cache.COUNTS.hits == 1


def test_an_expression_and_a_template_of_the_same_text_are_kept_apart(learner: Learner) -> None:
    env = jinja2.Environment()
    assert env.from_string("name").render(name="x") == "name"
    assert env.compile_expression("name")(name="x") == "x"
    assert env.from_string("name").render(name="x") == "name"
    assert env.compile_expression("name")(name="x") == "x"
    assert (template_cache.COUNTS.hits, template_cache.COUNTS.reported) == (2, 2)


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


def test_a_filter_that_now_takes_the_context_is_not_served_stale(learner: Learner) -> None:
    """The generated code passes the context to a `pass_context` filter and not to a plain one."""
    source = "{{ name | decorate }}"
    plain = jinja2.Environment()
    plain.filters["decorate"] = lambda value: f"<{value}>"
    assert plain.from_string(source).render(name="x") == "<x>"
    assert template_cache.COUNTS.reported == 1

    with_context = jinja2.Environment()
    with_context.filters["decorate"] = pass_context(lambda context, value: f"<{value} of {context['owner']}>")
    assert with_context.from_string(source).render(name="x", owner="y") == "<x of y>"
    assert template_cache.COUNTS.hits == 0

    assert plain.from_string(source).render(name="x") == "<x>"
    assert template_cache.COUNTS.hits == 1, "the first compilation's entry serves the filters it was made for"


def test_a_filter_missing_when_compiled_is_not_assumed_missing_later(learner: Learner) -> None:
    source = "{% if flag %}{{ name | later }}{% else %}none{% endif %}"
    without = jinja2.Environment()
    assert without.from_string(source).render(flag=False, name="x") == "none"

    with_filter = jinja2.Environment()
    with_filter.filters["later"] = lambda value: value * 2
    assert with_filter.from_string(source).render(flag=True, name="x") == "xx"
    assert template_cache.COUNTS.hits == 0


def test_compiler_settings_are_part_of_the_key(learner: Learner) -> None:
    source = "{% if true %}\n  x\n{% endif %}\n<<name>>"
    plain = jinja2.Environment()
    trimmed = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    angled = jinja2.Environment(variable_start_string="<<", variable_end_string=">>")
    results = [env.from_string(source).render(name="n") for env in (plain, trimmed, angled)]
    assert results == ["\n  x\n\n<<name>>", "  x\n<<name>>", "\n  x\n\nn"]
    assert template_cache.COUNTS.hits == 0
    assert [env.from_string(source).render(name="n") for env in (plain, trimmed, angled)] == results
    assert template_cache.COUNTS.hits == 3


def test_a_constant_folded_random_is_not_kept(learner: Learner) -> None:
    """Ansible 2.18 folds `random` on a constant at compile time (2.19 compiles without folding);
    either way each run draws anew."""
    source = "{{ 1000000000 | random }}"
    drawn = {str(render(source)) for _ in range(4)}
    assert len(drawn) > 1
    if _ansible_folds_constants():
        assert template_cache.COUNTS.compiled == 4
        assert template_cache.COUNTS.reported == 0
        assert entries(learner) == []


def test_a_folded_call_of_any_filter_is_not_kept(learner: Learner) -> None:
    env = jinja2.Environment()
    env.filters["draw"] = lambda end: random.randrange(end)
    assert env.optimized
    drawn = {env.from_string("{{ 1000000000 | draw }}").render() for _ in range(4)}
    assert len(drawn) > 1
    assert (template_cache.COUNTS.reported, template_cache.COUNTS.hits) == (0, 0)


def test_a_report_is_kept_only_under_the_key_the_worker_computes_for_it(learner: Learner) -> None:
    """A run chooses what the worker compiles, never what is kept under a key: a report whose
    source or settings are not those of its key is not kept."""
    source = "{{ items | map('string') | join('+') }}"
    assert render(source) == "1+2+3"
    (key,) = entries(learner)
    learner.store.entries.clear()
    meta = {**learner.last_meta, "key": key}
    evil = "{{ lookup('pipe', 'touch /tmp/poisoned') }}".encode()
    assert template_cache._derive(meta, evil) is None  # noqa: SLF001
    assert template_cache._derive({**meta, "settings": {**meta["settings"], "trim_blocks": not meta["settings"]["trim_blocks"]}}, source.encode()) is None  # noqa: SLF001
    assert template_cache._derive({**meta, "environment": "builtins.object"}, source.encode()) is None  # noqa: SLF001
    assert template_cache._derive({**meta, "settings": {"finalize": "x"}}, source.encode()) is None  # noqa: SLF001
    derived = template_cache._derive(meta, source.encode())  # noqa: SLF001
    assert derived is not None and derived[0] == key


def test_large_sources_are_not_reported_and_a_full_store_keeps_no_more(learner: Learner) -> None:
    env = jinja2.Environment()
    large = "{{ x }}" + " " * template_cache.MAX_SOURCE
    assert env.from_string(large).render(x=1).startswith("1 ")
    assert template_cache.COUNTS.reported == 0

    learner.store.max_entries = 0
    assert env.from_string("{{ x }}").render(x=1) == "1"
    assert template_cache.COUNTS.reported == 1
    assert entries(learner) == []


def test_raw_compilations_are_left_alone(learner: Learner) -> None:
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
