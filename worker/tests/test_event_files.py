"""ansible-runner's event files, written in one piece."""

from __future__ import annotations

import json

import ansible_runner.runner

from ansible_operator_worker.speedups import event_files


class Writes:
    """A text file that counts its writes."""

    def __init__(self) -> None:
        self.pieces: list[str] = []

    def write(self, text: str) -> int:
        self.pieces.append(text)
        return len(text)


def test_ansible_runner_writes_each_event_file_once_with_the_text_json_dump_gives() -> None:
    event = {
        "uuid": "0b5c",
        "counter": 7,
        "stdout": "ok: [localhost] \u2713",
        "event_data": {"res": {"changed": False, "msg": "All assertions passed"}, "duration": 0.125, "n": None},
    }
    piecewise = Writes()
    json.dump(event, piecewise)
    event_files.install()
    whole = Writes()
    ansible_runner.runner.json.dump(event, whole)
    assert len(piecewise.pieces) > 10
    assert whole.pieces == ["".join(piecewise.pieces)]
    assert ansible_runner.runner.json.load is json.load
    assert json.dump is not event_files.dump, "the json module itself is left alone"
