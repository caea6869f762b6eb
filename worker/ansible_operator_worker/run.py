"""The run process: a fork of the zygote that becomes what `ansible-runner run <dir> ...` would be,
with the argv, environment, working directory and standard streams the operator gave the run, and
runs ansible-runner's own command-line entry point. A spare run process is forked ahead of its run
and prepares what does not depend on the run while it waits for it."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable
from typing import NoReturn

from . import ansible_state, playbook, process, protocol
from .speedups import runner_cli

#: A run request with its stdout and stderr.
Request = tuple[protocol.RunRequest, int, int]


def prepare() -> None:
    """What a run process does before it knows its run: its own process group, as the operator
    starts ansible-runner, in a session of its own with no controlling terminal (a playbook run in
    this process, `in_process.py`, finds none to prompt on, as one on ansible-runner's pty finds
    only that); a subreaper, so what the run leaves behind stays below it for the operator to end;
    signal dispositions as after exec; the run's own Ansible write locks."""
    os.setsid()
    process.become_subreaper()
    process.reset_signals()
    ansible_state.renew_write_locks()


def spare(receive: Callable[[], Request | None], control_fd: int, worker: playbook.Worker) -> NoReturn:
    """A spare run process: prepares, then waits for its run and runs it; exits when none comes."""
    try:
        prepare()
        request = receive()
    except BaseException:  # noqa: BLE001 - a spare that cannot serve ends; the zygote forks runs itself
        os._exit(1)
    if request is None:
        os._exit(0)
    main(*request, control_fd, worker, prepared=True)


def main(
    request: protocol.RunRequest,
    stdout: int,
    stderr: int,
    control_fd: int,
    worker: playbook.Worker,
    prepared: bool = False,
) -> NoReturn:
    """Runs ansible-runner with the request's argv (after the program name) and exits with its
    status."""
    status = 1
    try:
        if not prepared:
            prepare()
        # Dumpable as after exec, now that it is a run: the zygote is not, nor is a spare while it
        # waits, so that no run can change the process a later run is served by.
        process.set_dumpable(True)
        stdin = os.open(os.devnull, os.O_RDONLY)
        process.redirect(stdin, stdout, stderr)
        for fd in {stdin, stdout, stderr} - {0, 1, 2}:
            os.close(fd)
        process.replace_environment(request.env)
        process.start_locale()
        os.chdir(request.cwd)
        process.standard_streams()
        script = os.path.abspath(shutil.which("ansible-runner", path=request.env.get("PATH")) or "ansible-runner")
        process.set_name(script)
        sys.argv = [script, *request.argv]
        sys.path[:] = [os.path.dirname(script), *process.BASE_SYS_PATH]
        playbook.install(worker, request.id, control_fd)
        runner_cli.install()
        from ansible_runner.__main__ import main as ansible_runner

        status = process.run_main(ansible_runner)
    finally:
        process.finish(status, report=lambda code: _tell_exit(control_fd, request.id, code))


def _tell_exit(control_fd: int, run_id: str, code: int) -> None:
    """Tells the operator the run's exit status as it exits, before its memory is given back; the
    zygote tells it again once it has reaped the process (the operator takes the first)."""
    protocol.send_fd(control_fd, {"type": "exited", "id": run_id, "code": code, "signal": None})
