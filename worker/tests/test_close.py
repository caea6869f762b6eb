"""The playbook process's pty is closed as soon as the process has exited, with the status
ansible-runner reports, a process that outlives the wait is still ended, the operator hears
how the process ended, and a status told as the process exits is taken without waiting for the
process to be reaped."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pexpect

from ansible_operator_worker.playbook import close_when_exited, keeping_descriptors, report_end, take_told_status


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


def test_a_finishing_process_tells_its_status_and_closes_its_output_before_it_exits() -> None:
    told, tell = os.pipe()
    code = f"""
import os
from ansible_operator_worker import process
def tell(status):
    os.write({tell}, b"%d" % status)
    # Its output has ended when it tells: nothing it writes now is seen.
print("last words", flush=True)
process.finish(7, report=tell)
"""
    child = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, pass_fds=(tell,), check=False)
    os.close(tell)
    assert os.read(told, 16) == b"7"
    assert child.stdout == b"last words\n"
    assert child.returncode == 7


def test_a_told_status_ends_the_wait_while_the_process_still_lingers() -> None:
    told, tell = os.pipe()
    os.set_inheritable(tell, True)  # this child is exec'd; a warm playbook process is not
    # Tells 3, closes its pty, and lingers as a process giving back its memory would.
    code = f"import os, time; os.write({tell}, b'3'); [os.close(fd) for fd in (0, 1, 2)]; time.sleep(30)"
    child = keeping_descriptors(pexpect.spawn, [tell])(sys.executable, ["-c", code], encoding="utf-8")
    os.close(tell)
    close_when_exited(child)
    take_told_status(child, told)
    try:
        started = time.monotonic()
        while child.isalive():
            child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=10)
        child.close()
        assert time.monotonic() - started < 5
        assert (child.exitstatus, child.signalstatus) == (3, None)
    finally:
        os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)


def test_a_process_that_tells_nothing_is_waited_for_as_before() -> None:
    told, tell = os.pipe()
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    child = keeping_descriptors(pexpect.spawn, [tell])(sys.executable, ["-c", code], encoding="utf-8")
    os.close(tell)
    close_when_exited(child)
    take_told_status(child, told)
    child.expect(pexpect.EOF, timeout=10)
    child.close()
    assert (child.exitstatus, child.signalstatus) == (None, signal.SIGKILL)
