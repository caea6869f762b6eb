"""What the worker recognises in the command lines ansible-runner and Ansible build: taken from
their own code where it is importable, so a change in either shows up here."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from ansible_operator_worker import agent, playbook
from ansible_operator_worker.speedups import modules


@pytest.fixture
def ansiballz(tmp_path: Path) -> Path:
    script = tmp_path / "ansible-tmp-1" / "AnsiballZ_k8s_info.py"
    script.parent.mkdir()
    script.write_text("# module payload\n")
    return script


def module_command(env: str, interpreter: str, script: Path) -> str:
    """The command line Ansible's local connection gets for a module (ActionBase and the sh plugin)."""
    from ansible.plugins.shell.sh import ShellModule

    shell = ShellModule()
    inner = shell.build_module_command(env, f"#!{interpreter}", str(script))
    inner = shell.append_command(inner, "sleep 0")
    return f"/bin/sh -c {shell.quote(inner)}"


def test_a_plain_module_call_is_recognised_with_its_environment(ansiballz: Path) -> None:
    command = module_command("LANG=C.UTF-8 LC_ALL=C.UTF-8 GREETING='hello world'", sys.executable, ansiballz)
    call = modules.parse(command.encode(), sys.executable)
    assert call == modules.ModuleCall(
        env={"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "GREETING": "hello world"},
        script=str(ansiballz),
        interpreter=sys.executable,
    )


def test_a_pipelined_module_call_is_recognised_without_a_script() -> None:
    from ansible.plugins.shell.sh import ShellModule

    shell = ShellModule()
    inner = shell.append_command(shell.build_module_command("LANG=C.UTF-8", f"#!{sys.executable}", "").strip(), "sleep 0")
    call = modules.parse(f"/bin/sh -c {shell.quote(inner)}", sys.executable)
    assert call == modules.ModuleCall(env={"LANG": "C.UTF-8"}, script=None, interpreter=sys.executable)
    assert modules.parse(f"/bin/sh -c {shell.quote(inner.replace(sys.executable, '/usr/bin/python3.999'))}", sys.executable) is None


def test_another_interpreter_or_extra_arguments_are_left_to_exec(ansiballz: Path) -> None:
    assert modules.parse(module_command("", "/usr/bin/python3.999", ansiballz), sys.executable) is None
    with_args = module_command("", sys.executable, ansiballz).replace("&& sleep 0", "jid 60 && sleep 0")
    assert modules.parse(with_args, sys.executable) is None
    assert modules.parse(module_command("", sys.executable, ansiballz.parent / "AnsiballZ_gone.py"), sys.executable) is None


def test_privilege_escalation_is_left_to_exec(ansiballz: Path) -> None:
    inner = f"sudo -H -S -n -u root /bin/sh -c 'echo BECOME-SUCCESS-x ; {sys.executable} {ansiballz}'"
    assert modules.parse(f"/bin/sh -c {playbook_quote(inner)}", sys.executable) is None


def test_interpreters_are_the_same_only_in_the_same_environment(tmp_path: Path) -> None:
    assert modules.same_interpreter(sys.executable, sys.executable)
    other = tmp_path / "python3"
    other.symlink_to(os.path.realpath(sys.executable))
    assert not modules.same_interpreter(str(other), sys.executable), "another virtualenv's python"
    assert not modules.same_interpreter("python3", sys.executable)


def test_ansible_runners_ssh_agent_wrapper_is_understood(tmp_path: Path) -> None:
    from ansible_runner.config.runner import RunnerConfig

    config = RunnerConfig(private_data_dir=str(tmp_path), playbook="site.yml")
    key = str(tmp_path / "artifacts" / "1" / "ssh_key_data")
    wrapped = config.wrap_args_with_ssh_agent(["ansible-playbook", "-i", "inv dir", "site.yml"], key)
    assert agent.parse(wrapped) == (key, None, ["ansible-playbook", "-i", "inv dir", "site.yml"])
    command = playbook.understand(wrapped)
    assert isinstance(command, playbook.Command)
    assert command.args == ["-i", "inv dir", "site.yml"]
    assert command.agent == agent.Agent(key=key)


def test_other_commands_are_left_to_exec() -> None:
    assert playbook.understand(["ansible", "all", "-m", "ping"]) == "ansible-runner runs ansible, not ansible-playbook"
    assert isinstance(playbook.understand(["ssh-agent", "sh", "-c", "ansible-playbook x.yml"]), str)


def test_the_variables_python_reads_at_start_up_are_compared() -> None:
    worker = {"PATH": "/a", "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1"}
    assert playbook.interpreter_differences(worker, {**worker, "PATH": "/b", "K8S_AUTH_KUBECONFIG": "x"}) == []
    assert playbook.interpreter_differences(worker, {**worker, "LANG": "de_DE.UTF-8", "PYTHONPATH": "/x"}) == [
        "LANG",
        "PYTHONPATH",
    ]
    assert playbook.interpreter_differences(worker, {"PATH": "/a", "LANG": "C.UTF-8"}) == ["PYTHONUNBUFFERED"]


def test_interpreter_of_reads_the_shebang(tmp_path: Path) -> None:
    script = tmp_path / "ansible-playbook"
    script.write_text(f"#!{sys.executable}\nimport sys\n")
    assert playbook.interpreter_of(str(script)) == sys.executable
    script.write_text("#!/bin/sh\n")
    assert playbook.interpreter_of(str(script)) == "/bin/sh"
    assert playbook.interpreter_of(str(tmp_path / "missing")) is None


def playbook_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
