"""A run cannot change what later runs execute: a run that rewrites every file where workers kept
compiled code (templates, module bytecode, module payloads), adds its own there, and sends the
worker forged reports, leaves a later run of another playbook unchanged: the same results, and the
marker its poisoned code would write is not there."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

WORKER_PACKAGE = Path(__file__).parent.parent

#: The later run's playbook: templates in task arguments and conditionals, and modules run in
#: forked module processes (payloads built, their sources compiled).
VICTIM = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: templated
      debug:
        msg: "{{ greeting | upper }}-{{ numbers | map('string') | join(',') }}"
    - name: conditional
      debug:
        msg: "{{ numbers | sum }}"
      when: numbers | length > 2 and greeting is string
    - name: module
      ping:
        data: "{{ greeting }}"
    - name: another module
      stat:
        path: /
"""

#: The poisoning run's playbook: it first does what the victim does (so whatever a worker keeps
#: for those tasks is kept), then poisons.
POISONER = VICTIM + """
    - name: poison every cache
      poison:
        marker: "{{ marker }}"
        runner_dir: "{{ runner_dir }}"
"""

#: A module, beside the poisoning playbook, that rewrites every file under the runner directory's
#: cache directories (and adds its own) with code that writes the marker, each in the format the
#: workers that kept them read, and sends forged reports on every datagram socket it inherited: the
#: one `tests/executor.rs` runs through the operator.
POISON_MODULE = (WORKER_PACKAGE.parent / "tests/fixtures/poisoning/library/poison.py").read_text()


class Worker:
    """The warm worker, started in a runner directory as the operator starts it."""

    def __init__(self, runner_dir: Path, python: str, env: dict[str, str]) -> None:
        self.env = env
        self.runner_dir = runner_dir
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen(
            [python, "-m", "ansible_operator_worker"], stdin=theirs, cwd=runner_dir, env=env
        )
        theirs.close()
        self.socket.settimeout(180)
        assert self.receive()["type"] == "ready"

    def receive(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.socket.recv(1 << 20))
        return message

    def run(
        self, ident: str, playbook: str, extravars: dict[str, Any], library: dict[str, str] | None = None
    ) -> tuple[str, list[dict[str, Any]]]:
        """Runs `playbook` with ansible-runner in a private data directory of its own; its mode
        (warm or cold) and the results of its tasks."""
        data_dir = self.runner_dir / ident
        (data_dir / "project").mkdir(parents=True)
        (data_dir / "inventory").mkdir()
        (data_dir / "env").mkdir()
        (data_dir / "project" / "main.yml").write_text(playbook)
        for name, text in (library or {}).items():
            (data_dir / "project" / "library").mkdir(exist_ok=True)
            (data_dir / "project" / "library" / name).write_text(text)
        (data_dir / "inventory" / "hosts").write_text(
            f"localhost ansible_connection=local ansible_python_interpreter={self.env['WORKER_PYTHON']}\n"
        )
        (data_dir / "env" / "extravars").write_text(json.dumps(extravars))
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        argv = ["run", str(data_dir), "-p", "main.yml", "--ident", ident, "-j"]
        request = {"type": "run", "id": ident, "argv": argv, "env": self.env, "cwd": str(self.runner_dir)}
        socket.send_fds(self.socket, [json.dumps(request).encode()], [out_write, err_write])
        os.close(out_write)
        os.close(err_write)
        with os.fdopen(out_read, "rb") as out, os.fdopen(err_read, "rb") as err:
            output, errors = out.read(), err.read()
        mode = ""
        while True:
            message = self.receive()
            if message.get("id") != ident:
                continue  # the zygote's own word of an earlier run's exit
            if message["type"] == "mode":
                mode = message["mode"]
            if message["type"] == "exited":
                assert message["code"] == 0, (output + errors).decode(errors="replace")[-4000:]
                break
        results = []
        for line in output.splitlines():
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_skipped"):
                data = event["event_data"]
                results.append({"task": data["task"], "event": event["event"], "result": _stable(data.get("res", {}))})
        return mode, results

    def close(self) -> None:
        self.socket.close()
        self.process.wait(timeout=60)


def _stable(result: dict[str, Any]) -> dict[str, Any]:
    """A task's result without what differs between two identical runs (times, the stat's atime)."""
    stable = {k: v for k, v in result.items() if k not in ("invocation", "_ansible_no_log", "start", "end", "delta")}
    if isinstance(stable.get("stat"), dict):
        stable["stat"] = {k: v for k, v in stable["stat"].items() if k not in ("atime", "mtime", "ctime")}
    return stable


def _worker_python() -> str:
    """The interpreter the operator starts the worker on: ansible-playbook's."""
    from ansible_operator_worker.playbook import interpreter_of

    script = shutil.which("ansible-playbook", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    found = interpreter_of(script) if script else None
    return found or sys.executable


@pytest.fixture
def worker(tmp_path: Path) -> Any:
    python = _worker_python()
    env = {
        **os.environ,
        "PATH": f"{Path(python).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(WORKER_PACKAGE),
        "WORKER_PYTHON": python,
        "ANSIBLE_NOCOLOR": "1",
    }
    runner_dir = tmp_path / "runner"
    runner_dir.mkdir()
    started = Worker(runner_dir, python, env)
    try:
        yield started
    finally:
        started.close()


def test_a_run_that_poisons_every_cache_does_not_change_a_later_run(worker: Worker, tmp_path: Path) -> None:
    marker = tmp_path / "poisoned"
    variables = {"greeting": "hello", "numbers": [1, 2, 3]}
    mode, before = worker.run("victim-before", VICTIM, variables)
    assert mode == "warm"
    assert [r["event"] for r in before] == ["runner_on_ok"] * 4, before

    # The poisoner runs twice: once to fill whatever is kept, once more after the worker has
    # learnt from it, each time rewriting every cache file and sending forged reports.
    for ident in ("poisoner-1", "poisoner-2"):
        mode, poisoned = worker.run(
            ident,
            POISONER,
            {**variables, "marker": str(marker), "runner_dir": str(worker.runner_dir)},
            library={"poison.py": POISON_MODULE},
        )
        assert mode == "warm"
        poison = poisoned[-1]["result"]
        assert poison["written"] >= 3 and poison["sent"] >= 3, poison

    for ident in ("victim-after-1", "victim-after-2"):
        mode, after = worker.run(ident, VICTIM, variables)
        assert mode == "warm"
        assert after == before
    assert not marker.exists(), marker.read_text()


def test_cache_directories_left_in_the_runner_directory_are_removed_at_start(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Workers before this one kept compiled code in the runner directory, where runs could write
    it; this one keeps none there, and removes what it finds, saying so."""
    runner_dir = tmp_path / "runner"
    for name in (".templates", ".bytecode", ".ansiballz"):
        (runner_dir / name / "entries").mkdir(parents=True)
        (runner_dir / name).chmod(0o777)
        (runner_dir / name / "entries" / "code").write_bytes(b"written by a run")
    python = _worker_python()
    worker = Worker(runner_dir, python, {**os.environ, "PYTHONPATH": str(WORKER_PACKAGE)})
    worker.close()
    assert sorted(os.listdir(runner_dir)) == []
    logged = capfd.readouterr().err
    for name in (".templates", ".bytecode", ".ansiballz"):
        assert f"removing {runner_dir / name}: compiled code is no longer kept on disk" in logged
