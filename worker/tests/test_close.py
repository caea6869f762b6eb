"""The playbook process's pty is closed as soon as the process has exited, with the status
ansible-runner reports, and a process that outlives the wait is still ended."""

from __future__ import annotations

import sys

import pexpect

from ansible_operator_worker.playbook import close_when_exited


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
