"""What the worker keeps for every run (compiled templates, module bytecode, module payloads): code
that only the worker's own processes make, held in the zygote's memory and inherited by each run it
forks. A run never writes any of it. A run reports what it had to make itself as data (a template's
source and compiler settings, a module's source, a module's path), on a datagram socket it
inherits. The zygote takes the reports as bytes and, once no run is going (or after a while),
forks a learner: a process with nothing of any run in it, which makes each thing again from that
data alone (and, for a payload, from the files the worker itself finds) and sends the results
back. The zygote keeps them, bounded in count and size, for the runs it forks from then on. What a
run reports can only choose which things are made, never what a thing made from given inputs is."""

from __future__ import annotations

import hashlib
import json
import marshal
import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from . import process

#: Largest report a run sends (a module's source is the largest); larger ones are not sent.
MAX_REPORT = 192 * 1024

#: Reports waiting for a learner, at most (each at most `MAX_REPORT`), and how long the zygote lets
#: a learner work before it ends it.
MAX_WAITING = 512
MAX_WAITING_BYTES = 8 << 20
LEARNER_SECONDS = 30.0

#: CPU seconds a learner may use (it is killed by SIGXCPU past them).
_LEARNER_CPU_SECONDS = 20

#: A learner yields the CPU to runs: meanwhile they make what they lack themselves.
_LEARNER_NICENESS = 10


@dataclass
class Store:
    """Things kept by key, up to `max_entries` of them and `max_bytes` in all (each thing's size
    as its maker measures it: marshalled code, a payload's bytes)."""

    max_entries: int
    max_bytes: int
    entries: dict[str, Any] = field(default_factory=dict)
    size: int = 0

    def get(self, key: str) -> Any:
        """The thing kept under `key`, or None."""
        return self.entries.get(key)

    def put(self, key: str, value: Any, size: int) -> bool:
        """Keeps `value` unless `key` is kept already or the store is full."""
        if key in self.entries or len(self.entries) >= self.max_entries or self.size + size > self.max_bytes:
            return False
        self.entries[key] = value
        self.size += size
        return True


#: Reports the learner could not make anything of (by digest): runs do not send them again. A
#: template compiled with a filter only its playbook has is one; they would cost a learner a run.
REFUSED = Store(max_entries=4096, max_bytes=4096)

#: Makes a thing again from a report, in the learner: its key, the thing and its size; None when
#: it is not to be kept.
Derive = Callable[[dict[str, Any], bytes], "tuple[str, Any, int] | None"]

#: Each kind of thing kept: its store and how the learner makes it.
KINDS: dict[str, tuple[Store, Derive]] = {}

#: Where runs send reports (set in the zygote, inherited by every fork; None: nothing is learnt).
_sender: socket.socket | None = None
#: Where the zygote reads them.
_receiver: socket.socket | None = None


def register(kind: str, store: Store, derive: Derive) -> None:
    """Declares a kind of thing kept."""
    KINDS[kind] = (store, derive)


def open_reports() -> socket.socket:
    """In the zygote: the socket reports arrive on (every fork inherits the sending end)."""
    global _sender, _receiver
    _receiver, _sender = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    _receiver.setblocking(False)
    _sender.setblocking(False)
    return _receiver


def sender_fd() -> int | None:
    """The descriptor runs report on, for a process that closes the others it inherited."""
    return None if _sender is None else _sender.fileno()


def leave() -> None:
    """In a fork that serves a run: it never reads reports."""
    global _receiver
    if _receiver is not None:
        _receiver.close()
        _receiver = None


def _stop_reporting() -> None:
    """In the learner: what it compiles is not reported back to itself."""
    global _sender
    if _sender is not None:
        _sender.close()
        _sender = None


def report(kind: str, meta: dict[str, Any], data: bytes) -> None:
    """From a run: tells the worker it made a thing of `kind` from `data` and `meta`. Never waits;
    a report that does not fit is dropped (the next run reports it again)."""
    if _sender is None or kind not in KINDS:
        return
    try:
        header = json.dumps([kind, meta], separators=(",", ":")).encode()
    except (TypeError, ValueError):
        return
    message = len(header).to_bytes(4, "big") + header + data
    if len(message) > MAX_REPORT or REFUSED.get(_digest(message)) is not None:
        return
    try:
        _sender.send(message, socket.MSG_DONTWAIT)
    except OSError:
        pass


def _digest(message: bytes) -> str:
    return hashlib.sha256(message).hexdigest()


def _parse(message: bytes) -> tuple[str, dict[str, Any], bytes] | None:
    """A report, or None when it is not one."""
    length = int.from_bytes(message[:4], "big")
    try:
        kind, meta = json.loads(message[4 : 4 + length])
    except (ValueError, TypeError):
        return None
    if not isinstance(kind, str) or kind not in KINDS or not isinstance(meta, dict):
        return None
    return kind, meta, message[4 + length :]


def receive(receiver: socket.socket, waiting: list[bytes]) -> None:
    """In the zygote: takes the reports that arrived, as bytes, up to `MAX_WAITING` of them and
    `MAX_WAITING_BYTES` in all (the rest are read and dropped: runs report again what they lack)."""
    size = sum(len(message) for message in waiting)
    while True:
        try:
            message = receiver.recv(MAX_REPORT)
        except (BlockingIOError, InterruptedError):
            return
        if len(waiting) < MAX_WAITING and size + len(message) <= MAX_WAITING_BYTES and message not in waiting:
            waiting.append(message)
            size += len(message)


def learn(messages: list[bytes]) -> list[tuple[str, str, Any, int]]:
    """In the learner: makes again the thing of each report."""
    made = []
    seen: set[bytes] = set()
    for message in messages:
        parsed = _parse(message)
        if parsed is None or message in seen:
            continue
        seen.add(message)
        kind, meta, data = parsed
        store, derive = KINDS[kind]
        try:
            derived = derive(meta, data)
        except Exception:  # noqa: BLE001 - what cannot be made again is not kept
            derived = None
        if derived is None:
            made.append(("refused", _digest(message), True, 1))
        elif store.get(derived[0]) is None:
            made.append((kind, *derived))
    return made


def keep(made: list[tuple[str, str, Any, int]]) -> int:
    """In the zygote: keeps what its learner made; returns how many were kept."""
    kept = 0
    for kind, key, value, size in made:
        store = REFUSED if kind == "refused" else KINDS[kind][0] if kind in KINDS else None
        if store is not None and store.put(key, value, size):
            kept += 1
    return kept


@dataclass
class Learner:
    """A learner at work: its pid, the pipe its results come on, and when it must be done."""

    pid: int
    results: int
    deadline: float
    received: bytearray = field(default_factory=bytearray)


def start_learner(messages: list[bytes], leave_serving: Callable[[], None]) -> Learner | None:
    """In the zygote: forks a learner for `messages` (reports); None when it cannot."""

    def learned() -> bytes:
        kept_messages = list(messages)  # what the fork leaves behind may include the list
        leave_serving()
        _stop_reporting()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.nice(_LEARNER_NICENESS)
        resource.setrlimit(resource.RLIMIT_CPU, (_LEARNER_CPU_SECONDS, _LEARNER_CPU_SECONDS))
        return marshal.dumps(learn(kept_messages))

    forked = process.fork_writing(learned)
    if forked is None:
        return None
    pid, read = forked
    os.set_blocking(read, False)
    return Learner(pid, read, time.monotonic() + LEARNER_SECONDS)


def read_results(learner: Learner) -> bool:
    """In the zygote: reads what the learner sent so far; True once it has all (end of file)."""
    while True:
        try:
            chunk = os.read(learner.results, 1 << 20)
        except BlockingIOError:
            return False
        if not chunk:
            return True
        learner.received += chunk


def finish_learner(learner: Learner, complete: bool) -> int:
    """In the zygote: keeps a complete learner's results and ends it; returns how many were kept.
    Its exit is reaped with the zygote's other children."""
    os.close(learner.results)
    if not complete:
        try:
            os.kill(learner.pid, signal.SIGKILL)
        except OSError:
            pass
        return 0
    try:
        made = marshal.loads(bytes(learner.received))
    except (ValueError, EOFError, TypeError):
        return 0
    return keep(made) if isinstance(made, list) else 0
