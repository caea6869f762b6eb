"""Where ansible-playbook runs: where ansible-runner would exec `ansible-playbook` on its pty, the
warm run runs the already imported Ansible CLI instead, in the run process itself (`in_process.py`)
or in a fork of it (the playbook process), or execs the real program when the run cannot be made
identical (a fallback, reported to the operator with its reason).

ansible-runner starts either `ansible-playbook ARGS` or, when the run has an SSH key,
`ssh-agent [-a SOCK] sh -c "trap 'rm -f KEY' EXIT && ssh-add KEY && rm -f KEY && ansible-playbook ARGS"`.
Both are run warm: the first in the run process, the second in a playbook process that starts the
agent and loads the key itself (`agent.py`), then runs the playbook with the agent's variables, as
the shell would have.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import agent, ansible_state, in_process, kept, kubernetes_state, process, protocol
from .speedups import event_partials, event_stdout, inline_tasks, local_tmp, modules, playbook_cli, task_forks

#: Environment variables Python reads when it starts: a run whose values differ from the worker's
#: would start differently, so it is not run warm.
_INTERPRETER_VARIABLE_PREFIXES = ("PYTHON", "LC_")
_INTERPRETER_VARIABLES = frozenset({"LANG", "LANGUAGE"})


@dataclass(frozen=True)
class Worker:
    """What the worker was started with, to compare runs against."""

    #: The interpreter the worker runs on (`sys.executable`).
    python: str
    #: The environment the worker imported Ansible in.
    env: Mapping[str, str]
    #: Every Ansible setting as the worker read them.
    settings: ansible_state.Settings
    #: What the worker read its settings from, or None when a run must read them all again.
    inputs: ansible_state.Inputs | None = None


@dataclass(frozen=True)
class Command:
    """What ansible-runner asks to run, understood."""

    #: `ansible-playbook`'s arguments after the program name.
    args: list[str]
    #: The key to load into an agent first, when the run has one.
    agent: agent.Agent | None = None


@dataclass(frozen=True)
class Plan:
    """How the playbook process will run: warm, or by exec with the reason why not."""

    warm: bool
    reason: str = ""
    #: The resolved `ansible-playbook` script, for `sys.argv[0]`.
    script: str = ""
    command: Command | None = None
    #: Whether the run's settings are read as the worker read them (all but the per-run paths).
    worker_settings: bool = False


def understand(argv: Sequence[str]) -> Command | str:
    """The command in ansible-runner's argv, or why it is not one the worker runs."""
    if not argv:
        return "ansible-runner runs nothing"
    program = os.path.basename(argv[0])
    if program == "ansible-playbook":
        return Command(args=list(argv[1:]))
    if program != "ssh-agent":
        return f"ansible-runner runs {program}, not ansible-playbook"
    wrapped = agent.parse(argv)
    if wrapped is None:
        return "ansible-runner's ssh-agent command line is not the one this worker knows"
    key, socket_path, inner = wrapped
    if not inner or os.path.basename(inner[0]) != "ansible-playbook":
        return "ansible-runner's ssh-agent does not run ansible-playbook"
    return Command(args=inner[1:], agent=agent.Agent(key=key, socket=socket_path))


def interpreter_of(script: str) -> str | None:
    """The interpreter named by a script's `#!` line, or None for anything else."""
    try:
        with open(script, "rb") as file:
            first = file.readline(4096)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode(errors="replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0]


def interpreter_differences(worker_env: Mapping[str, str], env: Mapping[str, str]) -> list[str]:
    """Variables Python reads at start-up whose values differ between the worker and a run."""
    names = {
        name
        for name in set(worker_env) | set(env)
        if name in _INTERPRETER_VARIABLES or name.startswith(_INTERPRETER_VARIABLE_PREFIXES)
    }
    return sorted(name for name in names if worker_env.get(name) != env.get(name))


def plan(worker: Worker, argv: Sequence[str], env: Mapping[str, str], cwd: str | None) -> Plan:
    """Decides whether `argv` (what ansible-runner is about to exec) can run warm. On the way it
    re-reads Ansible's settings for the run's environment and directory, which the playbook
    process inherits: only those read when used if the rest are read from what the worker read
    them from."""
    command = understand(argv)
    if isinstance(command, str):
        return Plan(False, command)
    script = shutil.which("ansible-playbook", path=env.get("PATH"))
    if script is None:
        return Plan(False, "ansible-playbook is not on PATH")
    script = os.path.abspath(script)
    if interpreter_of(script) != worker.python:
        return Plan(False, f"{script} runs on {interpreter_of(script)}, the worker on {worker.python}")
    differing = interpreter_differences(worker.env, env)
    if differing:
        return Plan(False, f"variables Python reads at start-up differ from the worker's: {', '.join(differing)}")
    with ansible_state.environment_of(dict(env), cwd or os.getcwd()):
        if worker.inputs is not None and ansible_state.inputs() == worker.inputs:
            ansible_state.reread_runtime_settings()
            return Plan(True, script=script, command=command, worker_settings=True)
        ansible_state.reread_settings()
        run_settings = ansible_state.settings()
    unsafe = ansible_state.unsafe_differences(worker.settings, run_settings)
    if unsafe:
        return Plan(False, f"Ansible settings copied at import differ from the worker's: {', '.join(unsafe)}")
    return Plan(True, script=script, command=command)


def install(worker: Worker, run_id: str, control_fd: int) -> None:
    """Makes ansible-runner's `pexpect.spawn` run ansible-playbook warm where it can: in this
    process itself (`in_process.py`), or in a fork when the run's key needs an agent started
    first. The decision goes to the operator as a `mode` message."""
    import pexpect

    original = pexpect.spawn

    def spawn(command: str, args: list[str] | None = None, **kwargs: Any) -> Any:
        args = list(args or [])
        env = kwargs.get("env") or dict(os.environ)
        try:
            decided = plan(worker, [command, *args], env, kwargs.get("cwd"))
        except Exception as error:  # noqa: BLE001 - a surprise means: run it the proven way
            decided = Plan(False, f"deciding failed: {type(error).__name__}: {error}")
        mode = "warm" if decided.warm else "cold"
        here = decided.warm and decided.command is not None and decided.command.agent is None
        message = {"type": "mode", "id": run_id, "mode": mode, "reason": decided.reason, "one_process": here}
        protocol.send_fd(control_fd, message)
        if here:
            return in_process.Child(
                dict(env),
                kwargs.get("cwd") or os.getcwd(),
                lambda: _play_here(decided),
                lambda code: _send_end(control_fd, run_id, code, None),
            )
        if decided.warm and decided.command is not None:
            told, tell = os.pipe2(os.O_CLOEXEC)
            kwargs["preexec_fn"] = _playbook_process(decided, dict(env), tell)
            try:
                child = keeping_descriptors(original, [tell, kept.sender_fd()])(command, args, **kwargs)
            finally:
                os.close(tell)
            take_told_status(child, told)
        else:
            child = original(command, args, **kwargs)
        read_promptly(child)
        close_when_exited(child)
        report_end(child, run_id, control_fd)
        return child

    pexpect.spawn = spawn  # type: ignore[assignment]


def keeping_descriptors(spawn: type, fds: list[int | None]) -> type:
    """pexpect's spawn, whose child keeps `fds` open (ptyprocess closes every other descriptor)."""
    import ptyprocess

    kept_fds = tuple(fd for fd in fds if fd is not None)

    class Spawn(spawn):  # type: ignore[misc,valid-type]
        def _spawnpty(self, args: list[str], **kwargs: Any) -> Any:
            return ptyprocess.PtyProcess.spawn(args, pass_fds=kept_fds, **kwargs)

    return Spawn


def take_told_status(child: Any, told: int) -> None:
    """The playbook process tells its exit status on `told` as it exits, before it gives its
    memory back (`process.finish`, some 5 ms); ptyprocess would wait for it to be reaped, after
    that. The told status is taken as the process's end instead, exactly what waitpid would say;
    the zombie is reaped by the zygote once this process has exited. A process that ends without
    telling (a signal) is waited for as before."""
    ptyproc = child.ptyproc
    isalive = ptyproc.isalive
    os.set_blocking(told, False)

    def isalive_unless_told() -> bool:
        if not ptyproc.terminated:
            code = _read_status(told)
            if code is not None:
                ptyproc.status, ptyproc.exitstatus, ptyproc.signalstatus = code << 8, code, None
                ptyproc.terminated = True
        return isalive()

    ptyproc.isalive = isalive_unless_told


def _read_status(fd: int) -> int | None:
    try:
        told = os.read(fd, 16)
    except BlockingIOError:
        return None
    return int(told) if told.isdigit() else None


def _tell_status(fd: int) -> Callable[[int], None]:
    def tell(status: int) -> None:
        os.write(fd, b"%d" % status)

    return tell


def read_promptly(child: Any) -> None:
    """pexpect reads the playbook's output (its events among it) 2,000 bytes at a time and sleeps
    0.1 ms after every read, some thirty times for a short play, the last of them after the play has
    ended. Read what is there, up to 64 KiB, without the sleep: the same bytes reach ansible-runner,
    in fewer pieces."""
    child.maxread = 64 * 1024
    child.delayafterread = None


def close_when_exited(child: Any) -> None:
    """ansible-runner closes the playbook process's pty once it has read its end of output, and
    ptyprocess then sleeps a fixed `delayafterclose` (0.1 s, a third of a trivial warm run) before it
    looks whether the process has exited. Look every millisecond instead, for at most that long:
    the status read is the same, and a process still alive after it is ended as before."""
    ptyproc = child.ptyproc
    close = child.close

    def close_promptly(force: bool = True) -> None:
        deadline = time.monotonic() + ptyproc.delayafterclose
        while ptyproc.isalive() and time.monotonic() < deadline:
            time.sleep(0.001)
        ptyproc.delayafterclose = 0
        close(force)

    child.close = close_promptly


def report_end(child: Any, run_id: str, control_fd: int) -> None:
    """Tells the operator how the playbook process ended once ansible-runner has closed it:
    ansible-runner itself records only an exit status, `None` for a process a signal ended. What a
    killed playbook process leaves running (Ansible's task workers, their modules) came to this
    process, the run's subreaper: it is ended, as it would have been with the playbook."""
    close = child.close

    def close_and_report(force: bool = True) -> None:
        close(force)
        if child.signalstatus is not None:
            for pid in process.descendants(os.getpid()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        _send_end(control_fd, run_id, child.exitstatus, child.signalstatus)

    child.close = close_and_report


def _send_end(control_fd: int, run_id: str, code: int | None, signal: int | None) -> None:
    message = {"type": "playbook_ended", "id": run_id, "code": code, "signal": signal}
    try:
        protocol.send_fd(control_fd, message)
    except OSError:
        pass  # the operator is gone; the run's own end says the rest


def _playbook_process(plan: Plan, env: dict[str, str], tell: int) -> Callable[[], None]:
    """The function ptyprocess calls in its child where it would exec: it runs ansible-playbook in
    this process and never returns. Its exit status is told on `tell` (`take_told_status`)."""
    script, command = plan.script, plan.command
    assert command is not None

    def run() -> None:
        # Where exec would close them: the pipe ptyprocess watches to learn that exec happened,
        # and everything above 2 this process inherited, but the pipe its status is told on and
        # the socket it reports what it compiled on (`kept`).
        process.close_descriptors_from(3, keep={tell, kept.sender_fd()})
        process.set_name(script)
        process.replace_environment(env)
        process.reset_signals()
        process.standard_streams()
        status = 1
        try:
            if command.agent is not None:
                loaded = command.agent.start(env)
                if loaded != 0:
                    status = loaded
                    return
            status = _play(plan)
        finally:
            if command.agent is not None:
                command.agent.stop()
            process.finish(status, report=_tell_status(tell))

    return run


def _play_here(plan: Plan) -> int:
    """`_play` in the run process, named as the playbook process would be while it plays."""
    with open("/proc/self/comm") as comm:
        own = comm.read().strip()
    process.set_name(plan.script)
    try:
        return _play(plan, in_run_process=True)
    finally:
        process.set_name(own)


def _play(plan: Plan, in_run_process: bool = False) -> int:
    """ansible-playbook's CLI, in a process made to look like its own: its status. In the run
    process itself, the callback hands its partial events to ansible-runner in memory."""
    script, command = plan.script, plan.command
    assert command is not None
    sys.argv = [script, *command.args]
    sys.path[:] = [os.path.dirname(script), *process.BASE_SYS_PATH]
    ansible_state.fresh_process_state()
    kubernetes_state.fresh()
    modules.install()
    local_tmp.install()
    task_forks.install()
    inline_tasks.install()
    event_stdout.install(also=event_partials.hold if in_run_process else None)
    if plan.worker_settings:
        playbook_cli.install()
    from ansible.cli.playbook import main

    return process.run_main(main)

