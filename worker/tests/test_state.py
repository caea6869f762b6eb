"""The pieces of process state the worker puts back after a fork, and the protocol's checks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from ansible_operator_worker import ansible_state, process, protocol


def test_settings_read_only_when_used_may_differ_the_others_may_not() -> None:
    worker = {"DEFAULT_TIMEOUT": 10, "DEFAULT_ROLES_PATH": ["/a"], "DEFAULT_LOCAL_TMP": "/tmp/x"}
    run = {"DEFAULT_TIMEOUT": 10, "DEFAULT_ROLES_PATH": ["/b"], "DEFAULT_LOCAL_TMP": "/tmp/y"}
    assert ansible_state.unsafe_differences(worker, run) == []
    assert ansible_state.unsafe_differences(worker, {**run, "DEFAULT_TIMEOUT": 30}) == ["DEFAULT_TIMEOUT"]
    assert ansible_state.unsafe_differences(worker, {**run, "NEW": 1}) == ["NEW"]


def test_rereading_settings_follows_the_environment_and_the_working_directory(tmp_path) -> None:
    # In a child interpreter: re-reading changes the process-global constants.
    (tmp_path / "ansible.cfg").write_text("[defaults]\ntimeout = 42\n")
    code = textwrap.dedent(
        f"""
        import os
        from ansible_operator_worker import ansible_state
        from ansible import constants as C
        before = C.DEFAULT_TIMEOUT
        with ansible_state.environment_of(dict(os.environ, ANSIBLE_FORKS="7"), {str(tmp_path)!r}):
            ansible_state.reread_settings()
        print(before, C.DEFAULT_TIMEOUT, C.DEFAULT_FORKS, C.CONFIG_FILE.endswith("ansible.cfg"), os.getcwd() != {str(tmp_path)!r})
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env, cwd="/")
    assert out.stdout.split() == ["10", "42", "7", "True", "True"]


def _in_child(code: str, cwd: str, **env: str) -> list[str]:
    """Runs `code` in a fresh interpreter (settings are process-global) with `env` over an
    environment free of Ansible variables; its printed words."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        check=True,
        env={**base, **env},
        cwd=cwd,
    )
    return out.stdout.split()


def test_a_run_read_from_the_workers_inputs_gets_the_settings_reading_all_gives(tmp_path) -> None:
    # The run differs from the worker only in settings read when used; the other settings come
    # from the worker's reading; the result is what reading every setting gives.
    code = f"""
        import os
        from ansible_operator_worker import ansible_state
        worker_inputs = ansible_state.worker_inputs()
        worker = ansible_state.settings()
        run_env = dict(os.environ, ANSIBLE_ROLES_PATH="/roles/of/the/run", ANSIBLE_CACHE_PLUGIN_CONNECTION="/cache")
        with ansible_state.environment_of(run_env, {str(tmp_path)!r}):
            same = ansible_state.inputs() == worker_inputs
            ansible_state.reread_runtime_settings()
            partial = ansible_state.settings()
            ansible_state.reread_settings()
            full = ansible_state.settings()
        tmps = [partial.pop("DEFAULT_LOCAL_TMP"), full.pop("DEFAULT_LOCAL_TMP"), worker["DEFAULT_LOCAL_TMP"]]
        print(worker_inputs is not None, same, partial == full, partial["DEFAULT_ROLES_PATH"] == ["/roles/of/the/run"],
              len(set(tmps)) == 3, all(os.path.isdir(tmp) for tmp in tmps[:2]))
        """
    assert _in_child(code, cwd="/", ANSIBLE_TIMEOUT="17") == ["True"] * 6


def test_what_settings_are_read_from_includes_the_variables_the_config_file_and_relative_paths(tmp_path) -> None:
    (tmp_path / "with_cfg").mkdir()
    (tmp_path / "with_cfg" / "ansible.cfg").write_text("[defaults]\ntimeout = 42\n")
    (tmp_path / "other").mkdir()
    code = f"""
        import os
        from ansible_operator_worker import ansible_state
        worker = ansible_state.worker_inputs()
        def inputs(cwd, **env):
            with ansible_state.environment_of(dict(os.environ, **env), cwd):
                return ansible_state.inputs()
        other, with_cfg = {str(tmp_path / "other")!r}, {str(tmp_path / "with_cfg")!r}
        print(
            inputs(other) == worker,
            inputs(other, ANSIBLE_TIMEOUT="30") == worker,
            inputs(with_cfg) == worker,
            inputs(other, ANSIBLE_LIBRARY="/abs/library") == inputs("/", ANSIBLE_LIBRARY="/abs/library"),
            inputs(other, ANSIBLE_LIBRARY="library") == inputs("/", ANSIBLE_LIBRARY="library"),
            inputs(other, ANSIBLE_ROLES_PATH="roles") == worker,
        )
        """
    assert _in_child(code, cwd="/") == ["True", "False", "False", "True", "False", "True"]


def test_a_worker_whose_settings_warn_has_every_run_read_them_all() -> None:
    code = """
        from ansible_operator_worker import ansible_state
        print(ansible_state.worker_inputs() is None)
        """
    assert _in_child(code, cwd="/") == ["False"]
    assert _in_child(code, cwd="/", ANSIBLE_TEST_ENTRY_D="1") == ["True"]


def test_exit_statuses_are_the_interpreters() -> None:
    assert process.exit_status(SystemExit()) == 0
    assert process.exit_status(SystemExit(3)) == 3
    assert process.exit_status(SystemExit(256 + 2)) == 2
    assert process.exit_status(SystemExit("message")) == 1
    assert process.run_main(lambda: 5) == 5
    assert process.run_main(lambda: None) == 0


def test_an_escaping_exception_gives_status_one(capsys: pytest.CaptureFixture[str]) -> None:
    def boom() -> None:
        raise RuntimeError("boom")

    assert process.run_main(boom) == 1
    assert "RuntimeError: boom" in capsys.readouterr().err


def test_descendants_are_found_across_sessions() -> None:
    child = subprocess.Popen(["sh", "-c", "setsid sleep 30 & wait"])
    try:
        for _ in range(100):
            found = process.descendants(child.pid)
            if found:
                break
            import time

            time.sleep(0.02)
        assert found, "the grandchild in its own session is a descendant"
    finally:
        for pid in process.descendants(child.pid):
            os.kill(pid, 9)
        child.kill()
        child.wait()


def test_run_requests_are_checked_and_carry_descriptors() -> None:
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    read_end, write_end = os.pipe()
    try:
        message = {"type": "run", "id": "1", "argv": ["run"], "env": {"A": "b"}, "cwd": "/"}
        socket.send_fds(ours, [__import__("json").dumps(message).encode()], [write_end, write_end])
        received = protocol.receive(theirs)
        assert received is not None
        got, fds = received
        assert protocol.run_request(got) == protocol.RunRequest("1", ["run"], {"A": "b"}, "/")
        assert len(fds) == 2
        os.write(fds[0], b"x")
        assert os.read(read_end, 1) == b"x"
        for fd in fds:
            os.close(fd)
        with pytest.raises(protocol.ProtocolError, match="env must map strings"):
            protocol.run_request({**message, "env": {"A": 1}})
        ours.close()
        assert protocol.receive(theirs) is None
    finally:
        os.close(read_end)
        os.close(write_end)
        theirs.close()


def test_parsed_yaml_is_kept_by_content_and_every_caller_gets_its_own_copy() -> None:
    from ansible_operator_worker.speedups import parse_cache

    calls = []

    def parse() -> dict:
        calls.append(1)
        return {"routing": {"a": [1, 2]}}

    first = parse_cache._cached(b"same: bytes", parse)
    first["routing"]["a"].append(3)
    second = parse_cache._cached(b"same: bytes", parse)
    assert second == {"routing": {"a": [1, 2]}}, "a caller's change does not reach the next caller"
    assert len(calls) == 1, "parsed once"
    parse_cache._cached(b"other: bytes", parse)
    assert len(calls) == 2, "other content is parsed anew"


#: Child-interpreter code that counts Ansible's YAML parses in `parses` (after `yaml_loader` is imported).
_COUNTING_PARSES = """
    parses = []
    original = yaml_loader.AnsibleLoader.get_single_data
    def counting(self):
        parses.append(1)
        return original(self)
    yaml_loader.AnsibleLoader.get_single_data = counting
"""


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19 tags what it parses; its documentation is not kept")
def test_plugin_settings_from_kept_documentation_are_those_a_fresh_parse_gives() -> None:
    # In child interpreters: the cache patches Ansible's plugin loader for the whole process. A
    # configurable plugin the worker imported, with a builtin fragment, loaded as a run loads it.
    code = textwrap.dedent(
        """
        import json, os, sys
        import ansible.plugins.callback.minimal
        from ansible.parsing.yaml import loader as yaml_loader
        from ansible_operator_worker import ansible_state
        from ansible_operator_worker.speedups import parse_cache
        if sys.argv[1] == "cached":
            parse_cache.install()
        """
    ) + textwrap.dedent(_COUNTING_PARSES) + textwrap.dedent(
        """
        ansible_state.reread_settings()
        from ansible import constants
        from ansible.plugins.loader import callback_loader
        callback_loader.get("minimal", class_only=True)
        options = constants.config.get_configuration_definitions("callback", "minimal")
        positions = {name: list(option.get("description").ansible_pos) for name, option in options.items()}
        print(json.dumps({"options": options, "positions": positions, "parses": len(parses)}, sort_keys=True))
        """
    )
    runs = {
        mode: subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout
        for mode in ("fresh", "cached")
    }
    fresh, cached = (__import__("json").loads(runs[mode]) for mode in ("fresh", "cached"))
    assert fresh["parses"] > 0, "the plugin's documentation and its fragments are parsed when loaded"
    assert fresh["options"], "the plugin has settings"
    assert cached["parses"] == 0, "kept by the worker, not parsed again"
    assert cached["options"] == fresh["options"]
    assert cached["positions"] == fresh["positions"], "errors name the same file and line"


_REGISTERED_SETTINGS = """
    import json, sys
    import ansible.plugins.connection.ssh
    import ansible.plugins.callback.minimal
    from ansible.parsing.yaml import loader as yaml_loader
    from ansible_operator_worker import ansible_state
    from ansible_operator_worker.speedups import plugin_settings
    ansible_state.worker_inputs()
    if sys.argv[1] == "registered":
        plugin_settings.install()
    from ansible import constants
    from ansible.plugins import loader
""" + _COUNTING_PARSES


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19's plugin settings are not registered by the worker")
def test_a_run_finds_the_settings_of_the_workers_plugins_registered_as_its_own_load_would() -> None:
    code = textwrap.dedent(_REGISTERED_SETTINGS) + textwrap.dedent(
        """
        loader.connection_loader.get("ssh", class_only=True)
        loader.callback_loader.get("minimal", class_only=True)
        options = {kind: constants.config.get_configuration_definitions(kind, name)
                   for kind, name in (("connection", "ssh"), ("callback", "minimal"))}
        print(json.dumps({"options": options, "parses": len(parses)}, sort_keys=True))
        """
    )
    runs = {
        mode: __import__("json").loads(
            subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout
        )
        for mode in ("fresh", "registered")
    }
    assert runs["fresh"]["parses"] > 0 and runs["fresh"]["options"]["connection"]
    assert runs["registered"]["parses"] == 0, "registered by the worker, not read again"
    assert runs["registered"]["options"] == runs["fresh"]["options"]


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19's plugin settings are not registered by the worker")
def test_another_file_under_a_registered_name_or_a_playbooks_fragments_read_the_plugins_own_settings(
    tmp_path,
) -> None:
    code = textwrap.dedent(_REGISTERED_SETTINGS) + textwrap.dedent(
        f"""
        import types
        other = types.ModuleType("ssh")
        other.DOCUMENTATION = "options:\\n  only_here:\\n    description: an option of this file\\n"
        loader.connection_loader._load_config_defs("ssh", other, {str(tmp_path / "ssh.py")!r})
        ssh = sorted(constants.config.get_configuration_definitions("connection", "ssh"))
        loader.fragment_loader.add_directory({str(tmp_path)!r})
        loader.callback_loader.get("minimal", class_only=True)
        print(json.dumps({{"ssh": ssh, "parses": len(parses)}}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code, "registered"], capture_output=True, text=True, check=True)
    result = __import__("json").loads(out.stdout)
    assert result["ssh"] == ["only_here"], "the other file's own settings"
    assert result["parses"] >= 2, "the other file's, and the callback's read again with the playbook's fragments"


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19's plugin settings are not registered by the worker")
def test_a_plugin_without_settings_is_read_again_only_when_a_playbook_adds_fragments(tmp_path) -> None:
    code = "import ansible.plugins.callback.oneline\n" + textwrap.dedent(_REGISTERED_SETTINGS) + textwrap.dedent(
        f"""
        oneline = sys.modules["ansible.plugins.callback.oneline"]
        loader.callback_loader.get("oneline", class_only=True)
        loader.callback_loader.get("oneline", class_only=True)
        loads = len(parses)
        loader.fragment_loader.add_directory({str(tmp_path)!r})
        loader.callback_loader._load_config_defs("oneline", oneline, oneline.__file__)
        print(json.dumps({{"loads": loads, "with_fragments": len(parses) - loads,
                          "options": constants.config.get_configuration_definitions("callback", "oneline")}}))
        """
    )
    runs = {
        mode: __import__("json").loads(
            subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout
        )
        for mode in ("fresh", "registered")
    }
    assert runs["fresh"]["loads"] >= 2, "Ansible reads it at every load: there is nothing to register"
    assert runs["registered"]["loads"] == 0, "the worker noted it declares none"
    assert runs["registered"]["with_fragments"] > 0, "a playbook's fragments could give it some"
    assert runs["registered"]["options"] == runs["fresh"]["options"] == {}


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19's plugin settings are not registered by the worker")
def test_ansible_runners_callback_is_registered_with_the_settings_its_own_load_reads() -> None:
    # The worker does not import `awx_display`; a run does, from ansible-runner's callback directory.
    code = textwrap.dedent(
        """
        import os
        from ansible_runner.utils import get_callback_dir
        os.environ["ANSIBLE_CALLBACK_PLUGINS"] = get_callback_dir()
        import ansible.plugins.callback.default  # its base class, which the worker imports
        """
    ) + textwrap.dedent(_REGISTERED_SETTINGS) + textwrap.dedent(
        """
        registered = constants.config.has_configuration_definition("callback", "awx_display")
        loader.callback_loader.get("awx_display", class_only=True)
        options = constants.config.get_configuration_definitions("callback", "awx_display")
        print(json.dumps({"registered": registered, "options": options, "parses": len(parses)}, sort_keys=True))
        """
    )
    runs = {
        mode: __import__("json").loads(
            subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, check=True).stdout
        )
        for mode in ("fresh", "registered")
    }
    assert not runs["fresh"]["registered"] and runs["fresh"]["parses"] > 0
    assert runs["fresh"]["options"], "its settings come from the fragment it extends"
    assert runs["registered"]["registered"], "registered by the worker before any run loads it"
    assert runs["registered"]["parses"] == 0, "its documentation is not read again"
    assert runs["registered"]["options"] == runs["fresh"]["options"]


@pytest.mark.skipif(ansible_state.core_version() >= (2, 19), reason="2.19's plugin settings are not registered by the worker")
def test_a_callback_whose_documentation_differs_from_the_workers_reads_its_own() -> None:
    code = textwrap.dedent(_REGISTERED_SETTINGS) + textwrap.dedent(
        """
        import os, types
        from ansible_runner.utils import get_callback_dir
        changed = types.ModuleType("awx_display")
        changed.DOCUMENTATION = "options:\\n  only_here:\\n    description: an option of the changed file\\n"
        path = os.path.join(get_callback_dir(), "awx_display.py")
        loader.callback_loader._load_config_defs("awx_display", changed, path)
        print(json.dumps(sorted(constants.config.get_configuration_definitions("callback", "awx_display"))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code, "registered"], capture_output=True, text=True, check=True)
    assert __import__("json").loads(out.stdout) == ["only_here"]


def test_the_workers_unpickled_metadata_goes_to_the_first_reader_in_each_forked_process(monkeypatch) -> None:
    import pickle

    from ansible_operator_worker.speedups import parse_cache

    data = b"plugin_routing: {filter: {a: {redirect: b}}}"
    parsed = {"plugin_routing": {"filter": {"a": {"redirect": "b"}}}}
    key = parse_cache._key(data)
    monkeypatch.setitem(parse_cache._parsed, key, pickle.dumps(parsed))
    monkeypatch.setattr(parse_cache, "_whole", {key: pickle.loads(pickle.dumps(parsed))})
    monkeypatch.setattr(parse_cache, "_taken", set())
    whole = parse_cache._whole[key]

    def unparsable() -> object:
        raise AssertionError("kept: never parsed again")

    def run() -> tuple[bool, bool, object, object]:
        first = parse_cache._cached(data, unparsable)
        first["plugin_routing"]["filter"]["a"]["redirect"] = "changed by the run"
        second = parse_cache._cached(data, unparsable)
        in_its_fork = process.computed_in_child(lambda: parse_cache._cached(data, unparsable) is whole)
        return first is whole, second is whole, second, in_its_fork

    first_is_whole, second_is_whole, second, in_its_fork = process.computed_in_child(run)
    assert first_is_whole, "the first reader in a fork takes the worker's copy"
    assert not second_is_whole and second == parsed, "later readers get their own, as parsed"
    assert in_its_fork is False, "a process forked after the first read gets its own too"
    assert whole == parsed and not parse_cache._taken, "the worker's copy and state are untouched"
    assert process.computed_in_child(lambda: parse_cache._cached(data, unparsable) is whole), "the next run takes it"


def test_builtin_filter_and_test_plugins_loaded_by_the_worker_are_the_ones_a_run_finds() -> None:
    # In a child interpreter: loading plugins changes `sys.modules` and the loaders for the process.
    code = textwrap.dedent(
        """
        import sys
        from ansible_operator_worker import zygote
        zygote._preload_jinja_plugins()
        before = set(sys.modules)
        from ansible.plugins.loader import filter_loader, test_loader
        from ansible.template import Templar
        from ansible.parsing.dataloader import DataLoader
        try:
            from ansible.template import trust_as_template  # 2.19: only trusted strings are templates
        except ImportError:
            trust_as_template = str
        templar = Templar(loader=DataLoader(), variables={"items": [3, 1, 2]})
        source = "{{ items | sort | to_json }} {{ items is sequence }} {{ 'a' | b64encode }}"
        print(templar.template(trust_as_template(source)))
        print(sorted(name for name in set(sys.modules) - before if name.startswith(("ansible.plugins.filter", "ansible.plugins.test"))))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == "[1, 2, 3] True YQ=="
    assert out[1] == "[]", "no filter or test plugin file is loaded again"


def test_a_run_finds_the_filters_beside_its_playbook_beside_the_ones_the_worker_kept(tmp_path) -> None:
    # In a child interpreter: the worker's kept filters and the added directory are the process's.
    (tmp_path / "filter_plugins").mkdir()
    (tmp_path / "filter_plugins" / "shout.py").write_text(
        "class FilterModule:\n    def filters(self):\n        return {'shout': lambda text: text.upper() + '!'}\n"
    )
    code = textwrap.dedent(
        f"""
        from ansible_operator_worker import zygote
        zygote._preload_jinja_plugins()
        from ansible.plugins.loader import add_all_plugin_dirs
        from ansible.template import Templar
        from ansible.parsing.dataloader import DataLoader
        try:
            from ansible.template import trust_as_template  # 2.19: only trusted strings are templates
        except ImportError:
            trust_as_template = str
        add_all_plugin_dirs({str(tmp_path)!r})  # what ansible-playbook does with the playbook's directory
        print(Templar(loader=DataLoader()).template(trust_as_template("{{{{ 'hi' | shout }}}} {{{{ [2, 1] | sort }}}}")))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "HI! [1, 2]", out.stderr


def test_payload_bytecode_the_worker_compiled_is_served_by_source_with_the_payloads_file_names(tmp_path) -> None:
    # In a child interpreter: the cache patches zipimport for the whole process. A module process
    # compiles what the worker does not have and reports its source; the worker's learner compiles
    # it again; the next module process with the same source gets that code, named as its payload.
    code = textwrap.dedent(
        """
        import sys, zipfile
        from ansible_operator_worker import kept
        from ansible_operator_worker.speedups import modules
        reports = []
        kept.report = lambda kind, meta, data: reports.append((kind, meta, data))
        modules.install_bytecode()
        modules.cache_payload_bytecode()
        for payload in sys.argv[1:]:
            sys.modules.pop("payload_module", None)
            sys.path.insert(0, payload)
            import payload_module
            print(payload_module.where(), len(reports), len(modules.BYTECODE.entries))
            sys.path.remove(payload)
            for kind, meta, data in reports:
                modules.BYTECODE.put(*modules._derive_bytecode(meta, data))
        """
    )
    payloads = []
    for name in ("first", "second"):
        payload = tmp_path / f"{name}_payload.zip"
        with __import__("zipfile").ZipFile(payload, "w") as zf:
            zf.writestr("payload_module.py", "def where():\n    return where.__code__.co_filename\n")
        payloads.append(str(payload))
    out = subprocess.run([sys.executable, "-c", code, *payloads], capture_output=True, text=True, check=True)
    first, second = [line.split() for line in out.stdout.splitlines()]
    assert first[0] == f"{tmp_path}/first_payload.zip/payload_module.py"
    assert int(first[1]) >= 1 and first[2] == "0", "compiled and reported"
    assert second[0] == f"{tmp_path}/second_payload.zip/payload_module.py", "the worker's code, renamed"
    assert second[1] == first[1] and int(second[2]) >= 1, "nothing more to report"
