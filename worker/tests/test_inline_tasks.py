"""Tasks that never leave the controller run in the playbook process of a warm run, with
the results a forked task gives them; every other task still forks."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_operator_worker.speedups import inline_tasks

PLAYBOOK = Path(__file__).parent / "playbooks" / "inline.yml"
WORKER = Path(__file__).parent.parent

#: ansible-playbook, with the inline tasks installed when asked, telling how often it forked.
_BOOTSTRAP = """
import os, sys
forks = 0
fork = os.fork
def counted():
    global forks
    forks += 1
    return fork()
os.fork = counted
if sys.argv[1] == "inline":
    from ansible_operator_worker.speedups import inline_tasks
    inline_tasks.install()
from ansible.cli.playbook import main
sys.argv = ["ansible-playbook", *sys.argv[2:]]
try:
    main()
finally:
    print(f"forks={forks}", file=sys.stderr)
"""


def _play(mode: str, tmp_path: Path, *args: str) -> tuple[int, list[dict[str, Any]], int]:
    """ansible-playbook's exit status, every task result in order, and its fork count."""
    inventory = tmp_path / "hosts"
    inventory.write_text(f"localhost ansible_connection=local ansible_python_interpreter={sys.executable} greeting=hello\n")
    env = {
        **os.environ,
        "PYTHONPATH": str(WORKER),
        "ANSIBLE_STDOUT_CALLBACK": "results_json",
        "ANSIBLE_CALLBACK_PLUGINS": str(Path(__file__).parent / "callback_plugins"),
        "ANSIBLE_NOCOLOR": "1",
        "INLINE_TEST_VALUE": "from the environment",
    }
    done = subprocess.run(
        [sys.executable, "-c", _BOOTSTRAP, mode, "-i", str(inventory), str(PLAYBOOK), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = json.loads(done.stdout)["results"]
    forks = int(done.stderr.rsplit("forks=", 1)[1])
    return done.returncode, report, forks


@pytest.mark.parametrize("check", [False, True])
def test_inline_tasks_give_the_results_forked_ones_do(tmp_path: Path, check: bool) -> None:
    args = ["--check", "--diff"] if check else []
    forked_status, forked, forked_count = _play("forked", tmp_path, *args)
    inline_status, inline, inline_count = _play("inline", tmp_path, *args)
    assert inline == forked
    assert inline_status == forked_status == 2
    results = {entry["task"]: entry["result"] for entry in inline}
    statuses = {entry["task"]: entry["status"] for entry in inline}
    assert [name for name, status in statuses.items() if status == "failed"] == ["undefined", "refused", "stopped"]
    assert results["shown"]["msg"] == "hello, the answer is 42"
    assert results["looked up (forks)"]["msg"] == "from the environment"
    assert "no_such_variable" in results["undefined"]["msg"]
    assert results["refused"]["msg"] == "the answer is 42, not 7"
    assert results["the host's own variables are intact"]["msg"] == "All assertions passed"
    assert results["stopped"]["msg"] == "stopped at 42"
    assert forked_count == 9
    # Only the lookup and the loop fork, where the worker's Ansible is the one inline tasks know.
    assert inline_count == (2 if inline_tasks.supported() else 9)


@functools.cache
def _plugin_loader() -> None:
    from ansible.plugins.loader import init_plugin_loader

    init_plugin_loader()


def _task(data: dict[str, Any]) -> Any:
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.task import Task

    _plugin_loader()
    return Task.load(data, loader=DataLoader())


@pytest.mark.parametrize(
    ("data", "inline"),
    [
        ({"assert": {"that": "x"}}, True),
        ({"ansible.builtin.debug": {"msg": "x"}}, True),
        ({"ansible.legacy.set_fact": {"a": 1}}, True),
        ({"fail": {"msg": "x"}}, True),
        ({"command": "true"}, False),
        ({"ansible.builtin.include_vars": {"file": "x.yml"}}, False),
        ({"debug": {"msg": "x"}, "loop": [1]}, False),
        ({"debug": {"msg": "x"}, "with_items": [1]}, False),
        ({"debug": {"msg": "x"}, "until": "x", "retries": 2}, False),
        ({"debug": {"msg": "x"}, "delegate_to": "elsewhere"}, False),
        ({"debug": {"msg": "x"}, "async": 5}, False),
        ({"debug": {"msg": "x"}, "timeout": 5}, False),
    ],
)
def test_only_plain_builtin_controller_tasks_run_inline(data: dict[str, Any], inline: bool) -> None:
    assert inline_tasks.eligible(_task(data)) is inline


def test_a_builtin_action_a_playbook_shadows_forks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.loader import action_loader

    (tmp_path / "assert.py").write_text(
        "from ansible.plugins.action import ActionBase\nclass ActionModule(ActionBase):\n    pass\n"
    )
    monkeypatch.setattr(action_loader, "_extra_dirs", [*action_loader._extra_dirs])
    action_loader.add_directory(str(tmp_path))
    try:
        assert not inline_tasks.eligible(_task({"assert": {"that": "x"}}))
        assert inline_tasks.eligible(_task({"ansible.builtin.assert": {"that": "x"}}))
    finally:
        monkeypatch.undo()
        action_loader._clear_caches()


@pytest.mark.parametrize(
    ("data", "inline"),
    [
        ({"kubernetes.core.k8s_info": {"kind": "Namespace"}}, True),
        ({"k8s_info": {"kind": "Namespace"}, "collections": ["kubernetes.core"]}, True),
        ({"kubernetes.core.k8s": {"state": "present"}}, True),
        ({"operator_sdk.util.k8s_status": {"kind": "x"}}, True),
        ({"kubernetes.core.k8s": {}, "become": True}, False),
        ({"kubernetes.core.k8s": {}, "loop": [1]}, False),
        ({"kubernetes.core.k8s": {}, "until": "x", "retries": 2}, False),
        ({"kubernetes.core.k8s": {}, "delegate_to": "elsewhere"}, False),
        ({"kubernetes.core.k8s": {}, "async": 5}, False),
        ({"kubernetes.core.k8s": {}, "timeout": 5}, False),
        # ansible-core routes the short name to kubernetes.core's module.
        ({"k8s_info": {"kind": "Namespace"}}, True),
        ({"command": "true"}, False),
        ({"ansible.builtin.debug": {"msg": "x"}}, False),
    ],
)
def test_only_plain_kubernetes_module_tasks_run_inline(data: dict[str, Any], inline: bool) -> None:
    assert inline_tasks.eligible_module(_task(data)) is inline


def test_a_kubernetes_module_another_collections_action_plugin_runs_forks(monkeypatch: pytest.MonkeyPatch) -> None:
    from ansible.plugins.loader import action_loader

    # `collections: [other.actions, kubernetes.core]` where other.actions has an action plugin
    # `k8s_info` and no such module: the module is kubernetes.core's, its action other.actions'.
    task = _task({"k8s_info": {"kind": "Namespace"}, "collections": ["kubernetes.core"]})
    assert inline_tasks.eligible_module(task)
    find = action_loader.find_plugin_with_context

    def other_collections(name: str, **kwargs: Any) -> Any:
        found = find(name, **kwargs)
        found.resolved_fqcn = "other.actions.k8s_info"
        return found

    monkeypatch.setattr(action_loader, "find_plugin_with_context", other_collections)
    assert not inline_tasks.eligible_module(task)


def test_a_kubernetes_module_task_forks_where_a_playbook_shadows_normal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ansible.plugins.loader import action_loader

    # operator_sdk.util's modules have no action plugin: Ansible runs them with
    # `ansible.legacy.normal`, which a playbook's `action_plugins/normal.py` replaces.
    task = _task({"operator_sdk.util.requeue_after": {"time": "1s"}})
    assert inline_tasks.eligible_module(task)
    (tmp_path / "normal.py").write_text(
        "from ansible.plugins.action import ActionBase\nclass ActionModule(ActionBase):\n    pass\n"
    )
    monkeypatch.setattr(action_loader, "_extra_dirs", [*action_loader._extra_dirs])
    action_loader.add_directory(str(tmp_path))
    try:
        assert not inline_tasks.eligible_module(task)
    finally:
        monkeypatch.undo()
        action_loader._clear_caches()
    assert inline_tasks.eligible_module(task)
