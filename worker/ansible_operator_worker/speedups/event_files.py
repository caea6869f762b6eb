"""Patches: `ansible_runner.runner.json` (a copy of `json` whose `dump` writes once). Knows: no
ansible-core code (any version); ansible-runner 2.4 (no version check).

ansible-runner writes every event of a run to its own file with `json.dump` through a `codecs`
writer. `json.dump` hands the writer each piece the encoder yields, some two hundred for an event,
and the writer encodes and writes each one: half the time of writing the file. The run process's
ansible-runner gets a `json` whose `dump` encodes the whole document first and writes it once: the
same text in the same files."""

from __future__ import annotations

import json
import types
from typing import IO, Any


def dump(obj: Any, fp: IO[str], **kwargs: Any) -> None:
    """`json.dump` in one write."""
    fp.write(json.dumps(obj, **kwargs))


def install() -> None:
    """Gives ansible-runner's runner module the `json` with the one-write `dump`."""
    import ansible_runner.runner

    whole = types.ModuleType("json")
    whole.__dict__.update(vars(json))
    whole.dump = dump  # type: ignore[attr-defined]
    ansible_runner.runner.json = whole  # type: ignore[attr-defined]
