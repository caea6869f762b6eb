"""Payloads are built by the worker's learner, only for a module file the worker finds by the
module's name, and a run gets one into its own cache only while every file it was built from is
unchanged and the run finds module_utils and collections where the worker does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_operator_worker import kept
from ansible_operator_worker.speedups import payload_cache

NAME = "ansible.modules.ping-ZIP_DEFLATED"


def test_the_learner_builds_a_payload_only_for_the_module_the_worker_finds_by_that_name(tmp_path: Path) -> None:
    # In a child interpreter: the learner installs Ansible's collection loader.
    code = textwrap.dedent(
        f"""
        import json, sys, zipfile, io, base64
        from ansible_operator_worker.speedups import payload_cache
        import ansible.modules.ping as ping
        from ansible.release import __version__
        name = {NAME!r} if __version__.startswith("2.18") else {NAME!r} + "-none"  # 2.19 adds its extensions
        payload_cache.install()
        derive = payload_cache._derive
        fake = sys.argv[1]
        refused = [
            derive({{"module_name": "ansible.builtin.ping", "module_path": fake, "name": {NAME!r}}}, b""),
            derive({{"module_name": "ansible.builtin.ping", "module_path": ping.__file__, "name": "../x-ZIP_DEFLATED"}}, b""),
            derive({{"module_name": "ansible.builtin.ping", "module_path": ping.__file__, "name": "x-ZIP_BZIP"}}, b""),
        ]
        key, (kept_name, payload, files, paths), size = derive(
            {{"module_name": "ansible.builtin.ping", "module_path": ping.__file__, "name": name}}, b""
        )
        from ansible.executor import module_common
        if hasattr(module_common, "_CachedModule"):  # 2.19 keeps the zip with metadata
            with open(sys.argv[2], "wb") as f:
                f.write(payload)
            payload = module_common._CachedModule.load(sys.argv[2]).zip_data
        names = zipfile.ZipFile(io.BytesIO(base64.b64decode(payload))).namelist()
        print(json.dumps([refused, key == ping.__file__, kept_name == name, [f[0] for f in files], names]))
        """
    )
    fake = tmp_path / "ping.py"
    fake.write_text("raise SystemExit('not the ping module')\n")
    out = subprocess.run([sys.executable, "-c", code, str(fake), str(tmp_path / "entry")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    refused, keyed_by_path, named, files, names = json.loads(out.stdout)
    assert refused == [None, None, None]
    assert keyed_by_path and named
    assert any(f.endswith("ansible/modules/ping.py") for f in files)
    assert any(f.endswith("ansible/module_utils/basic.py") for f in files)
    assert "ansible/modules/ping.py" in names and "ansible/module_utils/basic.py" in names


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> kept.Store:
    store = kept.Store(max_entries=10, max_bytes=1 << 20)
    monkeypatch.setattr(payload_cache, "STORE", store)
    monkeypatch.setattr(payload_cache, "_search_paths", lambda: ("module_utils", "collections"))
    return store


def test_a_kept_payload_goes_into_a_runs_cache_until_a_source_changes(tmp_path: Path, store: kept.Store) -> None:
    module, util = tmp_path / "ping.py", tmp_path / "basic.py"
    module.write_text("import basic\n")
    util.write_text("def main(): ...\n")
    files = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in (module, util))
    store.put(str(module), (NAME, b"zip of both", files, ("module_utils", "collections")), 11)

    first = tmp_path / "run1" / "ansiballz_cache"
    assert payload_cache._serve(str(module), str(first)) == NAME  # noqa: SLF001
    assert (first / NAME).read_bytes() == b"zip of both"
    assert payload_cache._serve(str(tmp_path / "other.py"), str(first)) is None, "another module file"  # noqa: SLF001

    util.write_text("def main(): return 1\n")
    second = tmp_path / "run2" / "ansiballz_cache"
    assert payload_cache._serve(str(module), str(second)) is None, "a changed module_util means building again"  # noqa: SLF001
    assert not second.exists()


def test_a_run_that_finds_module_utils_elsewhere_builds_its_own(
    tmp_path: Path, store: kept.Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "ping.py"
    module.write_text("")
    store.put(str(module), (NAME, b"zip", ((str(module), 0, module.stat().st_mtime_ns),), ("module_utils", "collections")), 3)
    monkeypatch.setattr(payload_cache, "_search_paths", lambda: ("module_utils", "its own collections"))
    assert payload_cache._serve(str(module), str(tmp_path / "cache")) is None  # noqa: SLF001
    assert not os.path.exists(tmp_path / "cache")
