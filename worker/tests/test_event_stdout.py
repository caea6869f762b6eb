"""ansible-runner's callback, as a playbook process loads it, writes each event's data at once: the
same characters its own `dump` writes in pieces."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).parent.parent

#: Loads the callback with Ansible's plugin loader, the speed-up installed (in a process of its own:
#: the callback wraps Ansible's `Display` as it is imported), and dumps events both ways.
_SCRIPT = """
import io, json, sys
from pathlib import Path
from ansible.plugins.loader import callback_loader, init_plugin_loader
from ansible_operator_worker.speedups import event_stdout

class Pieces(io.StringIO):
    def __init__(self):
        super().__init__()
        self.writes, self.flushes = 0, 0
    def write(self, text):
        self.writes += 1
        return super().write(text)
    def flush(self):
        self.flushes += 1

init_plugin_loader()
event_stdout.install()
callback_loader.add_directory(str(Path(event_stdout._callback_path()).parent))
module = sys.modules[type(callback_loader.get("awx_display")).__module__]
dump = module.EventContext.dump
found = []
for data in ({}, {"uuid": "0" * 36}, {"event": "runner_on_ok", "event_data": {"res": {"msg": "x" * 500}}}):
    for flush in (False, True):
        ours, theirs = Pieces(), Pieces()
        dump(module.event_context, ours, data, flush=flush)
        dump.replaced(module.event_context, theirs, data, flush=flush)
        found.append([ours.writes, theirs.writes, ours.getvalue() == theirs.getvalue(), ours.flushes, theirs.flushes, flush])
print(json.dumps(found))
"""


def test_the_callback_writes_each_event_once_with_the_characters_it_wrote_in_pieces() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT],
        env={"PYTHONPATH": str(WORKER), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for ours, theirs, same, our_flushes, their_flushes, flush in json.loads(done.stdout):
        assert ours == 1 and theirs >= 3
        assert same
        assert our_flushes == their_flushes == int(flush)
