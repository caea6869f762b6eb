"""Patches: `IsolatedFileWrite.set` of ansible-runner's `awx_display` callback, as a play in the run
process itself loads it (through `event_stdout`'s hook on Ansible's plugin loader), and the `codecs`
and `os` of `ansible_runner.runner` (copies whose `open` and `remove` know the partials held here).
Knows: no ansible-core code (any version); ansible-runner 2.4 (another version is left as it is).

ansible-runner's callback writes the data of each event it reports to a partial file
(`job_events/<uuid>-partial.json`, through a `.tmp` file renamed) before it writes the event's
marker to the play's output; the runner, reading the marker, reads the partial back, merges it
into the event, removes it and writes the event's own file. Ten or more partials a one-task run,
each a file made, renamed, read and removed; on an ext4 without a journal, a file made among many
removed in the last 30 s also costs a scan of them (the kernel's `recently_deleted`): a tenth of
the play's CPU in a burst of runs there. When the play runs in the run
process itself (`in_process.py`), the callback hands the partial's text (the same JSON, by the
callback's own encoder) to the runner in memory, and the runner reads it as it would have read the
file: the same events, the same files in `job_events/`, no partial on disk. A play in a playbook
process of its own (a run with an SSH key) writes its partials as before, and the runner reads any
partial it was not handed from the disk, as before.
"""

from __future__ import annotations

import codecs
import io
import os
import types
from typing import Any

#: Partials handed over, by their file's normalized path: the JSON text the file would have held.
_held: dict[str, str] = {}

#: The prefix of the callback's cache keys (Django's cache key format: `:1:ev-<uuid>`).
_KEY_PREFIX = ":1:ev-"


def _path_key(path: str) -> str:
    return os.path.normpath(os.path.abspath(path))


def hold(callback: types.ModuleType) -> None:
    """`callback` (ansible-runner's awx_display, just loaded) hands its partials over in memory."""
    writer = getattr(callback, "IsolatedFileWrite", None)
    if writer is None or hasattr(writer.set, "replaced"):
        return
    json, encoder = callback.json, callback.AnsibleJSONEncoderLocal

    def hand_over(self: Any, key: str, value: Any) -> None:
        """`IsolatedFileWrite.set`, keeping the partial's text here instead of in its file."""
        events = os.path.join(self.private_data_dir, "job_events")
        if not os.path.exists(events):
            os.mkdir(events, 0o700)
        partial = os.path.join(events, f"{key[len(_KEY_PREFIX):]}-partial.json")
        _held[_path_key(partial)] = json.dumps(value, cls=encoder)

    hand_over.replaced = writer.set  # type: ignore[attr-defined]
    writer.set = hand_over


def _open(filename: Any, mode: str = "r", encoding: str | None = None, errors: str = "strict", buffering: int = -1) -> Any:
    """`codecs.open`, giving a partial held here as a text file."""
    if mode == "r" and isinstance(filename, str):
        text = _held.get(_path_key(filename))
        if text is not None:
            return io.StringIO(text)
    return codecs.open(filename, mode, encoding, errors, buffering)


def _remove(path: Any, *, dir_fd: int | None = None) -> None:
    """`os.remove`, dropping a partial held here instead."""
    if dir_fd is None and isinstance(path, str) and _held.pop(_path_key(path), None) is not None:
        return
    os.remove(path, dir_fd=dir_fd)


def _copy(module: types.ModuleType, **replaced: Any) -> types.ModuleType:
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(vars(module))
    copy.__dict__.update(replaced)
    return copy


def install() -> None:
    """ansible-runner's runner reads partials held here before the disk (any process, any run)."""
    from . import event_stdout

    if not event_stdout.KNOWN:
        return
    import ansible_runner.runner

    ansible_runner.runner.codecs = _copy(codecs, open=_open)  # type: ignore[attr-defined]
    ansible_runner.runner.os = _copy(os, remove=_remove)  # type: ignore[attr-defined]
