"""The operator's side of the worker, for the worker's tests: the zygote started as the operator
starts it (the control socket on its standard input), asked for runs of ansible-runner."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any


class Worker:
    """A zygote and its control socket."""

    def __init__(self, cwd: Path) -> None:
        self.socket, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.process = subprocess.Popen([sys.executable, "-m", "ansible_operator_worker"], stdin=theirs, cwd=cwd)
        theirs.close()
        self.socket.settimeout(120)
        assert self.receive()["type"] == "ready"

    def receive(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.socket.recv(1 << 20))
        return message

    def run(
        self, run_id: str, argv: list[str], env: Mapping[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], bytes]:
        """Runs ansible-runner with `argv` (in this process's environment, or `env`): every message
        about the run until its second `exited`, and its standard output."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        request = {"type": "run", "id": run_id, "argv": argv, "env": dict(env or os.environ), "cwd": os.getcwd()}
        socket.send_fds(self.socket, [json.dumps(request).encode()], [out_write, err_write])
        os.close(out_write)
        os.close(err_write)
        with os.fdopen(out_read, "rb") as out, os.fdopen(err_read, "rb"):
            output = out.read()
        messages: list[dict[str, Any]] = []
        while [m["type"] for m in messages].count("exited") < 2:
            messages.append(self.receive())
        return messages, output

    def spares(self) -> list[int]:
        """The worker's children that serve no run yet."""
        return [pid for pid in _children(self.process.pid) if _name(pid) == _name(self.process.pid)]

    def close(self) -> None:
        self.socket.close()
        self.process.wait(timeout=30)


@contextmanager
def started(cwd: Path) -> Iterator[Worker]:
    """A worker for the life of the block."""
    worker = Worker(cwd)
    try:
        yield worker
    finally:
        worker.close()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as file:
        return [int(child) for child in file.read().split()]


def _name(pid: int) -> str:
    with open(f"/proc/{pid}/cmdline", "rb") as file:
        return file.read().decode(errors="replace")
