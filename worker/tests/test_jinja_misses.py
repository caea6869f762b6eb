"""Jinja2's own filters and tests, looked up through Ansible, answered without Ansible's search."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_operator_worker import ansible_state

pytestmark = pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19 loads Jinja2 plugins its own way")

#: In a child interpreter (the loaders and `pkgutil` are patched for the whole process): renders
#: with Jinja2's own filters and tests next to a playbook's filter plugin directory, and counts
#: Ansible's searches of the builtin plugin files.
_RENDER = """
    import json, pkgutil, sys
    from ansible.parsing.dataloader import DataLoader
    from ansible.plugins.loader import filter_loader, init_plugin_loader, test_loader
    from ansible.template import Templar
    from ansible_operator_worker.speedups import jinja_misses
    if sys.argv[1] == "kept":
        jinja_misses.install()
    init_plugin_loader()
    filter_loader.add_directory(sys.argv[2])
    searches = []
    search = pkgutil.iter_modules
    def counting(*args, **kwargs):
        searches.append(1)
        return search(*args, **kwargs)
    pkgutil.iter_modules = counting
    templar = Templar(loader=DataLoader(), variables={"items": [3, 1, 2], "text": "5"})
    source = "{{ items | length }} {{ 3 is number }} {{ items | first }} {{ text | int + 1 }} {{ items is defined }}"
    print(json.dumps({
        "rendered": templar.template(source),
        "number": test_loader.get("number"),
        "searches": len(searches),
    }))
"""


def test_jinja2s_own_names_render_as_after_ansibles_search_and_a_playbooks_plugin_still_wins(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'first': lambda value: 'the playbook first'}\n"
    )
    runs = {
        mode: json.loads(
            subprocess.run(
                [sys.executable, "-c", textwrap.dedent(_RENDER), mode, str(tmp_path)],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        for mode in ("searched", "kept")
    }
    assert runs["searched"]["rendered"] == "3 True the playbook first 6 True"
    assert runs["kept"]["rendered"] == runs["searched"]["rendered"]
    assert runs["kept"]["number"] is None and runs["searched"]["number"] is None
    assert runs["searched"]["searches"] > 0, "Ansible searches its builtin files for Jinja2's names"
    assert runs["kept"]["searches"] == 0, "the names the worker found missing are not searched again"


def test_names_ansible_routes_are_never_taken_as_missing() -> None:
    code = """
        import json
        from ansible_operator_worker import process
        from ansible_operator_worker.speedups import jinja_misses
        from ansible.plugins.loader import init_plugin_loader
        from ansible.utils.collection_loader._collection_finder import _get_collection_metadata
        missed = process.computed_in_child(jinja_misses._missed)
        init_plugin_loader()
        routing = _get_collection_metadata("ansible.builtin")["plugin_routing"]
        print(json.dumps({kind: sorted(names & set(routing.get(kind, {}))) for kind, names in missed.items()}
                         | {"counts": {kind: len(names) for kind, names in missed.items()}}))
    """
    out = json.loads(subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True).stdout)
    assert out["filter"] == [] and out["test"] == []
    assert out["counts"]["filter"] > 20 and out["counts"]["test"] > 10
