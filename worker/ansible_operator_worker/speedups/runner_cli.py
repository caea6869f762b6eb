"""Patches: `ansible_runner.__main__.AnsibleRunnerArgumentParser` (in a run: a stand-in of the kept
parser; in the zygote, for a moment, its `parse_args`). Knows: no ansible-core code (any version);
ansible-runner 2.4 (no version check; where `main()` does not build its parser as expected, each
run builds its own).

ansible-runner's command line, built once. Its `main()` builds a parser of seven subcommands and
some three hundred options on every call (about 7 ms of every run) before it parses the run's
argv. The zygote lets `main()` build it once, as it would, and keeps it; a run's `main()` then gets
a stand-in whose building calls do nothing and whose parsing and exits are the kept parser's.
Its options' defaults come from module constants read when ansible-runner is imported, the same
in the zygote and every run."""

from __future__ import annotations

import argparse
from typing import Any

#: The parser `ansible_runner.__main__.main()` builds, or None when it could not be kept.
_parser: argparse.ArgumentParser | None = None


class _Built(Exception):
    """Carries the parser out of `main()` where it would parse."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


class _Ignored:
    """What a building call returns in a run: subparsers, groups and options already built."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: _Ignored()


class _StandIn:
    """The parser `main()` builds, in a run: building does nothing, the rest is the kept parser."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self._parser = parser

    def __getattr__(self, name: str) -> Any:
        if name.startswith("add_"):
            return lambda *args, **kwargs: _Ignored()
        return getattr(self._parser, name)


def build() -> None:
    """In the zygote: runs `main()` until it parses, and keeps the parser it built."""
    global _parser
    from ansible_runner import __main__ as runner_main

    parser_class = runner_main.AnsibleRunnerArgumentParser
    own = parser_class.__dict__.get("parse_args")

    def built(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Built(self)

    parser_class.parse_args = built  # type: ignore[method-assign,assignment]
    try:
        runner_main.main(["run", "."])
    except _Built as found:
        _parser = found.parser
    except Exception:  # noqa: BLE001 - another ansible-runner: each run builds its own
        _parser = None
    finally:
        if own is None:
            del parser_class.parse_args
        else:
            parser_class.parse_args = own  # type: ignore[method-assign]


def install() -> None:
    """In a run process, before `main()`: it gets the kept parser."""
    if _parser is None:
        return
    from ansible_runner import __main__ as runner_main

    parser = _parser
    runner_main.AnsibleRunnerArgumentParser = lambda *args, **kwargs: _StandIn(parser)  # type: ignore[assignment,misc]
