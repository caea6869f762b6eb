"""Patches: `ansible.plugins.loader.Jinja2Loader.get_with_context`. Knows: ansible-core 2.18 (2.19
and later: not installed).

Jinja2's own filters and tests (`length`, `int`, `number`, `defined`...) looked up through Ansible
(ansible-core 2.18). Ansible asks its plugin loader first for every filter and test a template
names. A name that is not one of the listed builtin or legacy plugins is then looked for as
`ansible.builtin.<name>`: Ansible reads the routing metadata of `ansible.builtin` and loads every
builtin filter (or test) plugin file to scan its functions, and finds nothing, after which Jinja2's
own function is used. Each task's process does that anew for every such name its templates use,
some 2 ms a name.

That search reads only what ansible-core installed, so the worker does it once, in a child process
with the collection loader a run installs, for each of Jinja2's names, and keeps the names it found
nothing for without a message (no routing entry: no redirect, deprecation or removal). Runs answer
those names at once, as the search would have, once the plugins listed from the run's own plugin
directories do not have them either."""

from __future__ import annotations

from typing import Any

from .. import ansible_state, process


def install() -> None:
    """In the worker: finds the names Ansible's search misses, and makes runs answer them without
    searching."""
    from ansible.plugins.loader import Jinja2Loader, PluginLoadContext, get_with_context_result

    if ansible_state.core_version() >= (2, 19):  # 2.19 loads Jinja2 plugins its own way
        return
    missed: dict[str, frozenset[str]] | None = process.computed_in_child(_missed)
    if not missed:
        return
    search = Jinja2Loader.get_with_context

    def get_with_context(self: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in missed.get(self.type, ()):
            # As the search starts: the builtin and legacy plugins listed, the playbook's among them.
            listing = {key: value for key, value in kwargs.items() if key not in ("class_only", "collection_list")}
            self._ensure_non_collection_wrappers(*args, **listing)
            if name not in self._cached_non_collection_wrappers:
                return get_with_context_result(None, PluginLoadContext())
        return search(self, name, *args, **kwargs)

    Jinja2Loader.get_with_context = get_with_context  # type: ignore[method-assign]


def _missed() -> dict[str, frozenset[str]]:
    """In a child: Jinja2's filter and test names for which Ansible's search finds nothing, by
    plugin type."""
    from jinja2.defaults import DEFAULT_FILTERS, DEFAULT_TESTS
    from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader
    from ansible.utils.collection_loader._collection_finder import _get_collection_metadata

    init_plugin_loader()
    routing = _get_collection_metadata("ansible.builtin").get("plugin_routing", {})
    missed = {}
    for loader, names in ((filter_loader, DEFAULT_FILTERS), (test_loader, DEFAULT_TESTS)):
        routed = routing.get(loader.type, {})
        found_nothing = set()
        for name in names:
            if "." in name or name in routed:
                continue
            try:
                if loader.get_with_context(name).object is None:
                    found_nothing.add(name)
            except Exception:  # noqa: BLE001 - a name whose search fails is left to search
                continue
        missed[loader.type] = frozenset(found_nothing)
    return missed
