"""What runs report reaches the learner as data; what it makes is kept within bounds, and a report
it could make nothing of is not sent again."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from ansible_operator_worker import kept


@pytest.fixture
def reports(monkeypatch: pytest.MonkeyPatch) -> Iterator[socket.socket]:
    """A kind `upper` (its thing: the reported text in capitals, unless it is `refuse`), and the
    socket reports arrive on."""
    store = kept.Store(max_entries=2, max_bytes=100)

    def derive(meta: dict[str, Any], data: bytes) -> tuple[str, Any, int] | None:
        if data == b"refuse":
            return None
        if data == b"raise":
            raise ValueError("cannot")
        return data.decode(), data.upper(), len(data)

    monkeypatch.setattr(kept, "KINDS", {})
    monkeypatch.setattr(kept, "REFUSED", kept.Store(max_entries=10, max_bytes=10))
    kept.register("upper", store, derive)
    receiver = kept.open_reports()
    try:
        yield receiver
    finally:
        receiver.close()
        monkeypatch.setattr(kept, "_sender", None)
        monkeypatch.setattr(kept, "_receiver", None)


def test_what_the_learner_makes_is_kept_within_bounds(reports: socket.socket) -> None:
    for text in (b"a", b"a", b"bb", b"ccc"):
        kept.report("upper", {}, text)
    kept.report("unknown", {}, b"x")
    made = learnt(reports)
    assert made == [("upper", "a", b"A", 1), ("upper", "bb", b"BB", 2), ("upper", "ccc", b"CCC", 3)]
    assert kept.keep(made) == 2, "two entries at most"
    store = kept.KINDS["upper"][0]
    assert store.entries == {"a": b"A", "bb": b"BB"}


def test_a_report_the_learner_refuses_is_not_sent_again(reports: socket.socket) -> None:
    kept.report("upper", {}, b"refuse")
    kept.report("upper", {}, b"raise")
    made = learnt(reports)
    assert [kind for kind, *_ in made] == ["refused", "refused"]
    kept.keep(made)
    kept.report("upper", {}, b"refuse")
    kept.report("upper", {}, b"raise")
    kept.report("upper", {}, b"other")
    assert learnt(reports) == [("upper", "other", b"OTHER", 5)]


def test_reports_that_are_not_reports_are_refused(reports: socket.socket) -> None:
    sender = socket.socket(fileno=kept.sender_fd())
    try:
        for message in (b"", b"\x00\x00\x00\x05junk!", b"\x00\x00\x00\x02[]", b'\x00\x00\x00\x0c["upper",[]]'):
            sender.send(message)
    finally:
        sender.detach()
    assert learnt(reports) == []


def test_reports_wait_within_bounds(reports: socket.socket, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kept, "MAX_WAITING", 2)
    waiting: list[bytes] = []
    for text in (b"a", b"a", b"b", b"c"):
        kept.report("upper", {}, text)
    kept.receive(reports, waiting)
    assert len(waiting) == 2, "the same report waits once; past the bound, reports are dropped"
    kept.receive(reports, waiting)
    assert len(waiting) == 2 and kept.learn(waiting) == [("upper", "a", b"A", 1), ("upper", "b", b"B", 1)]


def learnt(receiver: socket.socket) -> list[tuple[str, str, Any, int]]:
    """What a learner makes of the reports that arrived."""
    waiting: list[bytes] = []
    kept.receive(receiver, waiting)
    return kept.learn(waiting)
