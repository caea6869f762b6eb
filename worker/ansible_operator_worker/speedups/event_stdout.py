"""Patches: `EventContext.dump` of ansible-runner's `awx_display` callback, as a playbook process
loads it (`ansible.plugins.loader.PluginLoader._load_module_source`, whose arguments are positional
in ansible-core 2.18 and keywords in 2.19). Knows: ansible-runner 2.4 (another version's callback is
left as it is).

ansible-runner's callback tells its runner about each event in the playbook's own output: before
and after each line Ansible prints, and around each callback, it writes the event's data, base64 in
chunks of 78 characters each followed by a cursor-back escape, between two erase-line escapes. It
writes each piece by itself, and the output is unbuffered (`PYTHONUNBUFFERED`) to a terminal: three
writes for the smallest event, some 66 in a `debug` run, each a system call and a wake-up of the
run process reading the terminal (some 4 ms of a 40 ms play on a two-core machine). The playbook
process's callback writes the same characters, in the same order, to the same stream, in one write
each time."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from importlib import metadata
from types import ModuleType
from typing import IO, Any


def _runner_2_4() -> bool:
    try:
        return metadata.version("ansible-runner").startswith("2.4.")
    except metadata.PackageNotFoundError:
        return False


#: Computed once, in the worker.
KNOWN = _runner_2_4()


def one_write_dump(callback: ModuleType) -> Any:
    """`EventContext.dump` of `callback` (ansible-runner's awx_display), writing once."""
    base64, json = callback.base64, callback.json

    def dump(self: Any, fileobj: IO[str], data: Any, max_width: int = 78, flush: bool = False) -> None:
        b64data = base64.b64encode(json.dumps(data).encode("utf-8")).decode()
        chunks = (b64data[offset : offset + max_width] for offset in range(0, len(b64data), max_width))
        text = "\x1b[K" + "".join(f"{chunk}\x1b[{len(chunk)}D" for chunk in chunks) + "\x1b[K"
        with self.display_lock:
            fileobj.write(text)
            if flush:
                fileobj.flush()

    return dump


def _callback_path() -> str:
    import ansible_runner

    return os.path.realpath(os.path.join(os.path.dirname(ansible_runner.__file__), "display_callback", "callback", "awx_display.py"))


def install(also: Callable[[ModuleType], None] | None = None) -> None:
    """In a playbook process: ansible-runner's callback, once loaded, writes each event at once
    (and `also` is given it: `event_partials.hold` in the run process's own play)."""
    if not KNOWN:
        return
    from ansible.plugins.loader import PluginLoader

    load = PluginLoader._load_module_source
    callback = _callback_path()

    @functools.wraps(load)
    def loading(self: Any, *args: Any, **kwargs: Any) -> ModuleType:
        module = load(self, *args, **kwargs)
        path = kwargs["path"] if "path" in kwargs else args[1] if len(args) > 1 else None
        context = getattr(module, "EventContext", None)
        if isinstance(path, str) and context is not None and os.path.realpath(path) == callback:
            if not hasattr(context.dump, "replaced"):
                dump = one_write_dump(module)
                dump.replaced = context.dump  # type: ignore[attr-defined]
                context.dump = dump
            if also is not None:
                also(module)
        return module

    PluginLoader._load_module_source = loading  # type: ignore[method-assign]
