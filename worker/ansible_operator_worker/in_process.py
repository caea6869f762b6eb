"""The playbook run in the run process itself: what ansible-runner would start on its pty runs in the
process that runs ansible-runner, with no second process. Every warm run does so but one with an
SSH key, whose agent a playbook process of its own starts (`playbook.py`). The fork of the run
process, its pty and the reads on it were some 25 ms of a three-task validation's 125 and 45 ms of
its 145 ms of CPU, and 30 ms of CPU of each run of a burst of one-task reconciles.

ansible-runner's own `Runner.run` still does everything around the play: the artifacts (`command`,
`stdout`, `job_events/`, `status`, `rc`), the event stream on standard output, the status. It gets
a stand-in for pexpect's child (`Child`) whose first `isalive()` runs the play. What the play writes
to its standard output and error reaches ansible-runner's stdout filter as a pty would have handed
it over: both streams merged, each newline written as CR LF (the terminal's ONLCR), the streams
saying they are a terminal (Ansible's colours are decided on it). Unlike a pty, there is no
controlling terminal and standard input is /dev/null: a prompt (`pause` without a time,
`vars_prompt`, an SSH host key question) does not wait for an answer that never comes.
"""

from __future__ import annotations

import codecs
import io
import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from . import process


class Terminal(io.RawIOBase):
    """The play's standard output and error, as ansible-runner reads them from a pty: bytes decoded
    as pexpect decodes them (UTF-8, errors replaced), newlines as CR LF, handed to `sink` (the
    stdout filter ansible-runner gives pexpect as `logfile_read`)."""

    def __init__(self, sink: Callable[[str], Any], fileno: int) -> None:
        super().__init__()
        self._sink = sink
        self._fileno = fileno
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._lock = threading.Lock()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        # What asks for it (curses, for Ansible's colours) gets the run's standard output.
        return self._fileno

    def write(self, data: Any) -> int:
        data = bytes(data)
        with self._lock:
            text = self._decoder.decode(data)
            if text:
                self._sink(text.replace("\n", "\r\n"))
        return len(data)


class Child:
    """What pexpect's `spawn` returns, for a play run in this process, with what ansible-runner
    uses of it (`logfile_read`, `isalive`, `expect`, `close`, `exitstatus`, `pid`): it sets
    `logfile_read`, then asks `isalive()` until it is not. The first time, the play runs: `run` is
    called in the environment, directory and signal dispositions its own process would have had,
    with the terminal's streams as `sys.stdout` and `sys.stderr`; its status becomes `exitstatus`
    and `ended` is told it."""

    def __init__(self, env: dict[str, str], cwd: str, run: Callable[[], int], ended: Callable[[int], None]) -> None:
        self.logfile_read: Any = None
        self.exitstatus: int | None = None
        self.pid = os.getpid()
        self._env = env
        self._cwd = cwd
        self._run = run
        self._ended = ended

    def isalive(self) -> bool:
        if self.exitstatus is None:
            self.exitstatus = self._play()
            self._ended(self.exitstatus)
        return False

    def _play(self) -> int:
        """Runs the play; what this process was (streams, directory, name) is put back after it."""
        sink = self.logfile_read.write if self.logfile_read is not None else (lambda text: None)
        saved = (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, os.getcwd())
        process.replace_environment(self._env)
        os.chdir(self._cwd)
        process.reset_signals()
        terminal = Terminal(sink, sys.stdout.fileno())
        stdout, stderr = process.output_streams(terminal, terminal, terminal=True)
        # ansible-runner's filter writes the events to *its* standard output, which it looks up on
        # `sys` as it writes: while the play has `sys.stdout`, the filter sees the run process's own.
        runner_utils = sys.modules.get("ansible_runner.utils")
        if runner_utils is not None:
            runner_utils.sys = _SysWith(stdout=saved[0], stderr=saved[1])  # type: ignore[attr-defined]
        sys.stdout = sys.__stdout__ = stdout
        sys.stderr = sys.__stderr__ = stderr
        try:
            return self._run()
        finally:
            for stream in (stdout, stderr):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__ = saved[:4]
            if runner_utils is not None:
                runner_utils.sys = sys  # type: ignore[attr-defined]
            os.chdir(saved[4])

    def expect(self, *args: Any, **kwargs: Any) -> int:
        return 0

    def close(self, force: bool = True) -> None:
        pass


class _SysWith:
    """`sys`, with other standard streams."""

    def __init__(self, stdout: Any, stderr: Any) -> None:
        self.stdout = stdout
        self.stderr = stderr

    def __getattr__(self, name: str) -> Any:
        return getattr(sys, name)
