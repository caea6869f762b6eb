"""Payloads a run built are kept with the files they were built from, and a later run gets them
back only while every one of those files is unchanged."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ansible_operator_worker import payload_cache


def build_payload(local_tmp: Path, sources: list[Path], name: str) -> None:
    """What Ansible's modify_module does on a cache miss: read the sources, write the payload."""
    data = b"".join(source.read_bytes() for source in sources)
    cache = local_tmp / "ansiballz_cache"
    cache.mkdir(exist_ok=True)
    (cache / name).write_bytes(b"zip of " + data)
    (cache / f"{name}.lock").write_bytes(b"")


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    store = tmp_path / "store"
    store.mkdir()
    monkeypatch.setattr(payload_cache, "STORE", str(store))
    sys.addaudithook(payload_cache._record_open)  # noqa: SLF001 - installed by install() in the worker
    return store


def test_a_built_payload_comes_back_in_the_next_run_until_a_source_changes(tmp_path: Path, store: Path) -> None:
    module, util = tmp_path / "k8s.py", tmp_path / "client.py"
    module.write_text("import client\n")
    util.write_text("def client(): ...\n")
    first = tmp_path / "run1"
    first.mkdir()
    build = payload_cache._recording(build_payload, lambda: str(first))  # noqa: SLF001
    build(first, [module, util], "kubernetes.core.k8s-ZIP_DEFLATED")

    assert payload_cache.keep(str(first)) == 1
    assert sorted(os.listdir(store)) == ["kubernetes.core.k8s-ZIP_DEFLATED", "kubernetes.core.k8s-ZIP_DEFLATED.sources.json"]

    second = tmp_path / "run2"
    second.mkdir()
    assert payload_cache.restore(str(second)) == 1
    restored = second / "ansiballz_cache" / "kubernetes.core.k8s-ZIP_DEFLATED"
    assert restored.read_bytes() == b"zip of import client\ndef client(): ...\n"

    util.write_text("def client(): return 1\n")
    third = tmp_path / "run3"
    third.mkdir()
    assert payload_cache.restore(str(third)) == 0, "a changed module_util means building again"


def test_a_payload_not_built_in_the_run_or_without_its_sources_is_not_kept(tmp_path: Path, store: Path) -> None:
    run = tmp_path / "run"
    (run / "ansiballz_cache").mkdir(parents=True)
    (run / "ansiballz_cache" / "ansible.builtin.ping-ZIP_DEFLATED").write_bytes(b"restored earlier")
    assert payload_cache.keep(str(run)) == 0
    assert os.listdir(store) == []
