"""The SSH agent of a run with a key: what ansible-runner's
`ssh-agent [-a SOCK] sh -c "trap 'rm -f KEY' EXIT && ssh-add KEY && rm -f KEY && ansible-playbook ..."`
does, done by the playbook process itself so ansible-playbook can run in it: start an agent, load
the key from its FIFO, remove the FIFO whatever happens, give the playbook the agent's variables,
and end the agent when the playbook ends."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field

_ASSIGNMENT = re.compile(r"^(SSH_AUTH_SOCK|SSH_AGENT_PID)=([^;]*);", re.MULTILINE)


def parse(argv: Sequence[str]) -> tuple[str, str | None, list[str]] | None:
    """`(key, agent socket or None, wrapped command)` of ansible-runner's ssh-agent command line,
    or None when it is not exactly that shape."""
    words = list(argv)
    if not words or os.path.basename(words[0]) != "ssh-agent":
        return None
    socket_path = None
    rest = words[1:]
    if rest[:1] == ["-a"] and len(rest) > 1:
        socket_path, rest = rest[1], rest[2:]
    if len(rest) != 3 or rest[0] != "sh" or rest[1] != "-c":
        return None
    try:
        script = shlex.split(rest[2])
    except ValueError:
        return None
    # trap 'rm -f KEY' EXIT && ssh-add KEY && rm -f KEY && <command...>
    if len(script) < 12 or script[0] != "trap" or script[2:4] != ["EXIT", "&&"]:
        return None
    key = script[5]
    expected = ["trap", f"rm -f {key}", "EXIT", "&&", "ssh-add", key, "&&", "rm", "-f", key, "&&"]
    if script[:11] != expected:
        return None
    return key, socket_path, script[11:]


@dataclass
class Agent:
    """The agent of one run."""

    #: The FIFO ansible-runner writes the key into.
    key: str
    #: `-a SOCK`, when ansible-runner names the agent's socket.
    socket: str | None = None
    _pid: int | None = field(default=None, init=False)

    def start(self, env: dict[str, str]) -> int:
        """Starts the agent and loads the key, printing what ssh-agent and ssh-add print. On
        success `env` (and this process's environment) gains the agent's variables and 0 is
        returned; otherwise the status the shell would have ended with."""
        try:
            command = ["ssh-agent", "-s"] + (["-a", self.socket] if self.socket else [])
            started = subprocess.run(command, stdout=subprocess.PIPE, check=False)
            if started.returncode != 0:
                return started.returncode
            found = variables(started.stdout.decode(errors="replace"))
            if "SSH_AUTH_SOCK" not in found:
                return 1
            pid = found.get("SSH_AGENT_PID", "")
            self._pid = int(pid) if pid.isdigit() else None
            env.update(found)
            os.environ.update(found)
            return subprocess.run(["ssh-add", self.key], env=env, check=False).returncode
        finally:
            _remove(self.key)

    def stop(self) -> None:
        """Ends the agent (ssh-agent ends itself when the command it runs ends)."""
        if self._pid is not None:
            try:
                os.kill(self._pid, signal.SIGTERM)
            except OSError:
                pass


def variables(output: str) -> dict[str, str]:
    """The variables `ssh-agent -s` prints."""
    return dict(_ASSIGNMENT.findall(output))


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
