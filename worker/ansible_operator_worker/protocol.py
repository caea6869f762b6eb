"""Messages between the operator and the worker: one JSON object per SOCK_SEQPACKET datagram.

Operator → worker:
    {"type": "run", "id": ..., "argv": [...], "env": {...}, "cwd": "..."}
        with two file descriptors attached (SCM_RIGHTS): the run's stdout and stderr.
Worker → operator:
    {"type": "ready", "pid": ..., "versions": {...}, "preload_seconds": ...}
    {"type": "started", "id": ..., "pid": ...}
    {"type": "spawn_failed", "id": ..., "error": "..."}
    {"type": "mode", "id": ..., "mode": "warm" | "cold", "reason": "...", "one_process": bool}
        `one_process`: the playbook runs in the run process itself.
    {"type": "playbook_ended", "id": ..., "code": int | None, "signal": int | None}
    {"type": "exited", "id": ..., "code": int | None, "signal": int | None}
        sent by the run process itself as it exits (before it gives its memory back), and again
        by the zygote once it has reaped it; the first counts. A run a signal ended is told once.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from typing import Any

#: Largest message either side sends (a run request carries the run's environment).
MAX_MESSAGE = 1 << 20
#: File descriptors a run request carries.
RUN_FDS = 2


class ProtocolError(Exception):
    """A message that is not what the protocol allows."""


@dataclass(frozen=True)
class RunRequest:
    """A run request, checked."""

    id: str
    #: ansible-runner's arguments after the program name.
    argv: list[str]
    #: The run's whole environment.
    env: dict[str, str]
    #: Its working directory.
    cwd: str


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    """Sends one message."""
    sock.send(_encoded(message))


def send_with_fds(sock: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
    """Sends one message with file descriptors attached (a run request, to a spare run process)."""
    socket.send_fds(sock, [_encoded(message)], fds)


def _encoded(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode()


def send_fd(fd: int, message: dict[str, Any]) -> None:
    """Sends one message on a raw socket file descriptor (a process that only holds the fd)."""
    sock = socket.socket(fileno=fd)
    try:
        send(sock, message)
    finally:
        sock.detach()


def receive(sock: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
    """The next message and the file descriptors that came with it; None when the peer is gone."""
    data, fds, flags, _ = socket.recv_fds(sock, MAX_MESSAGE, RUN_FDS)
    if not data:
        for fd in fds:
            _close(fd)
        return None
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
        for fd in fds:
            _close(fd)
        raise ProtocolError("message truncated")
    try:
        message = json.loads(data)
    except ValueError as error:
        for fd in fds:
            _close(fd)
        raise ProtocolError(f"not JSON: {error}") from error
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        for fd in fds:
            _close(fd)
        raise ProtocolError("a message is a JSON object with a type")
    return message, fds


def run_request(message: dict[str, Any]) -> RunRequest:
    """The run request in `message`, checked."""
    run_id, argv, env, cwd = message.get("id"), message.get("argv"), message.get("env"), message.get("cwd")
    if not isinstance(run_id, str) or not run_id:
        raise ProtocolError("run: id must be a non-empty string")
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ProtocolError(f"run {run_id}: argv must be a list of strings")
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in env.items()):
        raise ProtocolError(f"run {run_id}: env must map strings to strings")
    if not isinstance(cwd, str) or not cwd:
        raise ProtocolError(f"run {run_id}: cwd must be a path")
    return RunRequest(run_id, argv, env, cwd)


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass
