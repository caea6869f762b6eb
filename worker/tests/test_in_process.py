"""A warm run, whose playbook runs in the run process itself, gives what `ansible-runner` started as a
program gives, its playbook exec'd on a real pty: the same event stream on standard output, the same
artifacts (`stdout` line for line, every job event, `status`, `rc`). The operator is told the
playbook ran in the run process, and when it ended."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from zygote_client import Worker, started

PLAYBOOK = """\
- hosts: localhost:no_such_group
  gather_facts: false
  tasks:
    - name: say héllo ✓
      ansible.builtin.debug:
        msg: "hello {{ name }}, two lines:\\nsecond"
    - name: a fact
      ansible.builtin.set_fact:
        doubled: "{{ size * 2 }}"
    - name: a loop
      ansible.builtin.debug:
        msg: "item {{ item }}"
      loop: [a, b]
    - name: a command
      ansible.builtin.command: echo "{{ doubled }}"
      changed_when: false
    - name: an ignored failure
      ansible.builtin.command: /bin/false
      ignore_errors: true
    - name: a secret
      ansible.builtin.debug:
        msg: "{{ name }}"
      no_log: true
    - name: a condition
      ansible.builtin.debug:
        msg: "{{ undefined_for_a_warning | default('x') }}"
      when: size == 3
    - name: checked
      ansible.builtin.assert:
        that: size == 4
        fail_msg: "size must be 4, got {{ size }}"
"""

#: The runs' environment: this interpreter's ansible-runner and ansible-playbook first on PATH (the
#: toolchain under test, whichever venv's bin directory the caller's PATH holds).
_ENV = {**os.environ, "PATH": os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])}

#: Event keys that differ between any two runs.
_VOLATILE = {"uuid", "parent_uuid", "playbook_uuid", "play_uuid", "task_uuid", "created", "pid", "start", "end",
             "delta", "duration", "runner_ident"}


@pytest.fixture(scope="module")
def worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Worker]:
    with started(tmp_path_factory.mktemp("worker")) as worker:
        yield worker


def _private_data_dir(root: Path) -> Path:
    (root / "env").mkdir(parents=True)
    (root / "inventory").mkdir()
    (root / "env" / "extravars").write_text(json.dumps({"name": "Ünïcode", "size": 3}))
    (root / "inventory" / "hosts").write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    (root / "main.yml").write_text(PLAYBOOK)
    return root


#: Times in a task's result text (a command's `start`, `end` and `delta`), which vary.
_TIMES = re.compile(r"(\d{4}-\d\d-\d\d )?\d+:\d\d:\d\d\.\d+")


def _normalized(value: Any, root: str) -> Any:
    if isinstance(value, dict):
        return {k: _normalized(v, root) for k, v in value.items() if k not in _VOLATILE}
    if isinstance(value, list):
        return [_normalized(v, root) for v in value]
    if isinstance(value, str):
        return _TIMES.sub("TIME", value.replace(root, "ROOT"))
    return value


def _lines(text: str) -> list[Any]:
    """ansible-runner's output in JSON mode: an event per line, or a line of text."""
    return [json.loads(line) if line.startswith("{") else line for line in text.splitlines(keepends=True)]


def _run(worker: Worker | None, root: Path) -> dict[str, Any]:
    """A run of the playbook in `root`: by the worker, or by `ansible-runner` started as a program."""
    run_id = "warm" if worker else "cold"
    argv = ["run", str(root), "--rotate-artifacts", "1", "-p", str(root / "main.yml"), "-i", run_id, "-j", "-v"]
    if worker:
        messages, output = worker.run(run_id, argv, _ENV)
    else:
        runner = shutil.which("ansible-runner", path=_ENV["PATH"])
        assert runner, "ansible-runner is on PATH"
        done = subprocess.run([runner, *argv], env=_ENV, stdout=subprocess.PIPE, check=False)
        messages, output = [], done.stdout
    artifact = root / "artifacts" / run_id
    events = sorted(
        (json.loads(path.read_text()) for path in (artifact / "job_events").glob("*.json")),
        key=lambda event: event["counter"],
    )
    stdout = (artifact / "stdout").read_text()
    return {
        "messages": [{k: v for k, v in m.items() if k not in ("id", "pid")} for m in messages],
        "output": _normalized(_lines(output.decode()), str(root)),
        "events": _normalized(events, str(root)),
        "stdout": _normalized(_lines(stdout), str(root)),
        "files": sorted(path.name for path in artifact.iterdir()),
        "status": (artifact / "status").read_text(),
        "rc": (artifact / "rc").read_text(),
    }


def test_a_playbook_run_in_the_run_process_gives_what_ansible_runner_gives(worker: Worker, tmp_path: Path) -> None:
    cold = _run(None, _private_data_dir(tmp_path / "cold"))
    warm = _run(worker, _private_data_dir(tmp_path / "warm"))
    for key in ("output", "events", "stdout", "files", "status", "rc"):
        assert warm[key] == cold[key], key
    # What was compared is a real run's: every kind of result, a failure, and the pty's CR LF.
    assert warm["rc"] == "2" and warm["status"] == "failed"
    kinds = {event["event"] for event in warm["events"]}
    assert {"verbose", "runner_on_ok", "runner_item_on_ok", "runner_on_failed", "playbook_on_stats"} <= kinds
    text = json.dumps(warm["stdout"], ensure_ascii=False)
    assert "say héllo ✓" in text and "\\r\\n" in text
    assert "[WARNING]" in text
    assert "size must be 4, got 3" in json.dumps(warm["events"])
    # `started` comes from the zygote, `mode` from the run process: either may come first.
    types = [m["type"] for m in warm["messages"]]
    assert sorted(types[:2]) == ["mode", "started"] and types[2:] == ["playbook_ended", "exited", "exited"], types
    mode = next(m for m in warm["messages"] if m["type"] == "mode")
    assert mode == {"type": "mode", "mode": "warm", "reason": "", "one_process": True}
    assert warm["messages"][2] == {"type": "playbook_ended", "code": 2, "signal": None}


def test_a_run_that_cannot_run_warm_execs_its_playbook_in_a_fork_as_before(worker: Worker, tmp_path: Path) -> None:
    root = _private_data_dir(tmp_path / "fallback")
    # A variable Python reads at start-up differs from the worker's: the playbook is exec'd.
    (root / "env" / "envvars").write_text(json.dumps({"PYTHONHASHSEED": "7"}))
    ran = _run(worker, root)
    mode = next(m for m in ran["messages"] if m["type"] == "mode")
    assert mode["mode"] == "cold" and "PYTHONHASHSEED" in mode["reason"] and not mode["one_process"]
    assert ran["rc"] == "2"
