"""ansible-runner's callback, in a play run in the run process itself, hands each event's partial
data to the runner in memory: no partial file is made, and the runner writes the event file it
writes from a partial on disk."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORKER = Path(__file__).parent.parent

#: Loads the callback with Ansible's plugin loader (in a process of its own: the callback wraps
#: Ansible's `Display` as it is imported), the speed-up installed, and sends one event's partial
#: each way: held in memory (the speed-up) and written to disk (the callback's own `set`). The
#: runner's `event_callback` then merges each into its event and writes the event's file.
_SCRIPT = """
import datetime, json, os, sys, types
from pathlib import Path
from ansible.plugins.loader import callback_loader, init_plugin_loader
import ansible_runner.runner
from ansible_operator_worker.speedups import event_partials, event_stdout

artifacts = Path(sys.argv[1])
os.environ["AWX_ISOLATED_DATA_DIR"] = str(artifacts)
init_plugin_loader()
event_stdout.install(also=event_partials.hold)
event_partials.install()
callback_loader.add_directory(str(Path(event_stdout._callback_path()).parent))
module = sys.modules[type(callback_loader.get("awx_display")).__module__]
cache = module.event_context.cache
runner = types.SimpleNamespace(
    config=types.SimpleNamespace(artifact_dir=str(artifacts), ident="run", check_job_event_data=True),
    remove_partials=True, event_handler=None, last_stdout_update=0,
)
data = {"event": "runner_on_ok", "created": datetime.datetime(2026, 11, 29, 21, 0, 0),
        "event_data": {"res": {"msg": "h\\u00e9llo \\u2713", "n": (1, 2)}, "task": "a task"}}
found = {}
for uuid, how in (("0" * 36, "held"), ("1" * 36, "disk")):
    setter = type(cache).set if how == "held" else type(cache).set.replaced
    setter(cache, ":1:ev-" + uuid, dict(data, uuid=uuid))
    partials = sorted(p.name for p in (artifacts / "job_events").glob("*partial*"))
    ansible_runner.runner.Runner.event_callback(runner, {"uuid": uuid, "counter": 1 if how == "held" else 2, "stdout": "ok"})
    event_file = artifacts / "job_events" / f"{1 if how == 'held' else 2}-{uuid}.json"
    found[how] = {"partials": partials, "event": json.loads(event_file.read_text())}
found["left"] = sorted(p.name for p in (artifacts / "job_events").iterdir())
print(json.dumps(found))
"""


def test_a_partial_held_in_memory_gives_the_event_file_a_partial_on_disk_gives(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(tmp_path)],
        env={"PYTHONPATH": str(WORKER), "PATH": "/usr/bin:/bin", "HOME": "/tmp"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    held, disk = found["held"], found["disk"]
    assert held["partials"] == [], "a held partial is never a file"
    assert disk["partials"] == ["1" * 36 + "-partial.json"], "the callback's own set still writes one"
    for event in (held["event"], disk["event"]):
        assert event["event_data"]["res"] == {"msg": "héllo ✓", "n": [1, 2]}
        assert event["created"] == "2026-11-29T21:00:00"
        event.pop("uuid"), event.pop("counter")
    assert held["event"] == disk["event"]
    assert found["left"] == ["1-" + "0" * 36 + ".json", "2-" + "1" * 36 + ".json"], "the partial on disk was removed"
