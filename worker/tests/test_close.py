"""The playbook process's pty is closed as soon as the process has exited, with the status
ansible-runner reports, a process that outlives the wait is still ended, and the operator hears
how the process ended."""

from __future__ import annotations

import json
import signal
import socket
import sys

import pexpect

from ansible_operator_worker.playbook import close_when_exited, report_end


def spawn(code: str) -> pexpect.spawn:
    child = pexpect.spawn(sys.executable, ["-c", code], encoding="utf-8")
    close_when_exited(child)
    return child


def test_an_exited_process_keeps_its_exit_status() -> None:
    child = spawn("import sys; print('bye'); sys.exit(3)")
    child.expect(pexpect.EOF, timeout=10)
    child.close()
    assert (child.exitstatus, child.signalstatus) == (3, None)
    assert "bye" in child.before


def test_a_process_still_running_after_the_wait_is_ended_as_before() -> None:
    child = spawn("import os, time; os.close(1); os.close(2); time.sleep(30)")
    child.close()
    assert not child.isalive()
    assert child.exitstatus is None and child.signalstatus is not None


def test_the_operator_hears_which_signal_ended_the_playbook_process() -> None:
    operator, worker = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with operator, worker:
        child = spawn("import os, signal; os.kill(os.getpid(), signal.SIGKILL)")
        report_end(child, "run-1", worker.fileno())
        child.expect(pexpect.EOF, timeout=10)
        child.close()
        message = json.loads(operator.recv(4096))
    assert message == {"type": "playbook_ended", "id": "run-1", "code": None, "signal": signal.SIGKILL}
