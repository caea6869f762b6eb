"""Patches: `ansible.cli.playbook.PlaybookCLI.init_parser`. Knows: ansible-core 2.18 to 2.21 (no
version check; where the zygote cannot build the parser, each run builds its own).

ansible-playbook's command-line parser, built once. `PlaybookCLI.init_parser()` builds some
eighty options (about 4 ms of every run) before `parse()` parses the run's arguments. The zygote
builds it once and keeps it; a playbook process whose settings are read as the worker read them
parses with it. The options' defaults are settings (forks, remote user, become method, ...); a run
whose settings were read again in full (`playbook.plan`) builds its own."""

from __future__ import annotations

import argparse
from typing import Any

#: The parser `PlaybookCLI.init_parser()` builds, or None when it could not be kept.
_parser: argparse.ArgumentParser | None = None


def build() -> None:
    """In the zygote, once its settings are read: builds the parser and keeps it."""
    global _parser
    from ansible.cli.playbook import PlaybookCLI

    try:
        cli = PlaybookCLI(["ansible-playbook"])
        cli.init_parser()
    except Exception:  # noqa: BLE001 - another ansible-core: each run builds its own
        _parser = None
        return
    _parser = cli.parser


def install() -> None:
    """In a playbook process whose settings are the worker's, before `main()`: `PlaybookCLI`
    gets the kept parser instead of building one."""
    if _parser is None:
        return
    from ansible.cli.playbook import PlaybookCLI

    parser = _parser

    def init_parser(self: Any) -> None:
        self.parser = parser

    PlaybookCLI.init_parser = init_parser  # type: ignore[method-assign]
