"""Installing Ansible's collection loader keeps the importer cache's finders for the directories the
loader does not claim, and drops the ones it claims."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

#: In a child interpreter (the collection loader is installed for the whole process): fills the
#: importer cache as the worker does, installs the loader as a run's CLI does, and reports which
#: finders survived and whether collection code still imports.
_INSTALL = """
    import importlib, json, os, sys
    import ansible, ansible.plugins.loader, yaml
    from ansible_operator_worker.speedups import collection_loader
    if sys.argv[1] == "kept":
        collection_loader.install()
    package_dir = os.path.dirname(yaml.__file__)
    ansible_dir = os.path.dirname(ansible.plugins.loader.__file__)
    before = dict(sys.path_importer_cache)
    assert package_dir in before and ansible_dir in before
    ansible.plugins.loader.init_plugin_loader()
    after = sys.path_importer_cache
    module = importlib.import_module("ansible_collections.kubernetes.core.plugins.module_utils.version")
    print(json.dumps({
        "package_finder_kept": after.get(package_dir) is before[package_dir],
        "ansible_finder_kept": after.get(ansible_dir) is before[ansible_dir],
        "collection_module": module.__name__,
        "collection_loader": type(module.__loader__).__name__,
    }))
"""


def _install(mode: str) -> dict[str, object]:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_INSTALL), mode], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_loader_keeps_python_finders_it_does_not_claim_and_drops_its_own() -> None:
    kept = _install("kept")
    assert kept["package_finder_kept"] is True
    assert kept["ansible_finder_kept"] is False
    assert kept["collection_module"] == "ansible_collections.kubernetes.core.plugins.module_utils.version"
    assert kept["collection_loader"] == "_AnsibleCollectionLoader"


def test_without_it_ansible_empties_the_whole_cache() -> None:
    emptied = _install("ansible")
    assert emptied["package_finder_kept"] is False
    assert emptied["ansible_finder_kept"] is False
    assert emptied["collection_loader"] == "_AnsibleCollectionLoader"
