"""Patches: `ansible.utils.collection_loader._collection_finder._AnsibleCollectionFinder._install`.
Knows: ansible-core 2.18 to 2.21 (no version check).

Each run's CLI installs Ansible's collection loader (`init_plugin_loader`), and the install first
empties Python's whole path importer cache, so that no finder cached for a directory the loader
claims (Ansible's package, the collection paths) outlives it. A new `ansible-playbook` has little
in that cache by then. A run forked from the worker inherits a finder for every directory the
worker imported from, with its listing: emptying the cache frees them all (some 6 ms in a fork,
each freed page copied first), and the run lists those directories again on its next imports.

Now the install keeps the finders of the directories the new loader does not claim, as it found
them: they are Python's own, for the standard library and the installed packages, and each checks
its directory's modification time when used, as in any process. The finders of directories the
loader claims are dropped, as before. What the install empties is a new cache, put in place while
it runs: emptying the inherited one, even to fill it again, touched every entry (the loader's whole
install took 2.6–4.7 ms in a fork instead of 2.9–5.6, medians of 15, three pairs)."""

from __future__ import annotations

import sys
from typing import Any


def install() -> None:
    """Makes every later install of Ansible's collection loader keep the importer cache's entries
    for the directories it does not claim."""
    from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder

    install_finder = _AnsibleCollectionFinder._install

    def install_keeping_unclaimed(self: Any) -> None:
        # The install empties `sys.path_importer_cache`: it empties a new one instead (emptying
        # the inherited one would touch every finder in it), and the inherited one loses only the
        # entries the loader claims, then gains what the install added.
        inherited = sys.path_importer_cache
        claimed = [path for path in inherited if _claims(self, path)]
        sys.path_importer_cache = {}
        try:
            install_finder(self)
        finally:
            added = sys.path_importer_cache
            for path in claimed:
                inherited.pop(path, None)
            inherited.update(added)
            sys.path_importer_cache = inherited

    _AnsibleCollectionFinder._install = install_keeping_unclaimed  # type: ignore[method-assign]


def _claims(finder: Any, path: Any) -> bool:
    """Whether the collection loader's path hook takes `path` (its own test, on its own paths)."""
    try:
        finder._ansible_collection_path_hook(path)
    except ImportError:
        return False
    return True
