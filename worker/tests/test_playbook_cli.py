"""ansible-playbook's parser kept by the zygote parses a run's arguments as the parser the run
would build does, and refuses a wrong command line the same way."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from ansible.cli.playbook import PlaybookCLI

from ansible_operator_worker.speedups import playbook_cli

COMMAND_LINES = [
    ["ansible-playbook", "-i", "/r/inventory", "-e", "@/r/env/extravars", "/opt/playbooks/site.yml"],
    ["ansible-playbook", "-i", "/r/inventory", "-vvv", "--check", "--diff", "--limit", "web", "--forks", "3", "p.yml"],
    ["ansible-playbook", "--tags", "a,b", "--skip-tags", "c", "-e", "x=1", "-e", "y=2", "-u", "deploy", "-b", "p.yml"],
]


@pytest.fixture
def own_init_parser() -> Iterator[Any]:
    """Installs the kept parser; yields PlaybookCLI's own `init_parser`."""
    init_parser = PlaybookCLI.init_parser
    playbook_cli.build()
    assert playbook_cli._parser is not None
    playbook_cli.install()
    try:
        yield init_parser
    finally:
        PlaybookCLI.init_parser = init_parser  # type: ignore[method-assign]


def _parsed(argv: list[str]) -> tuple[Any, Any]:
    cli = PlaybookCLI(argv)
    cli.init_parser()
    try:
        return vars(cli.parser.parse_args(argv[1:])), cli.parser
    except SystemExit as exit:
        return ("exit", exit.code), cli.parser


@pytest.mark.parametrize("argv", COMMAND_LINES)
def test_a_run_parses_its_arguments_with_the_kept_parser_as_with_its_own(argv: list[str], own_init_parser: Any) -> None:
    kept_parsed, parser = _parsed(argv)
    assert parser is playbook_cli._parser
    PlaybookCLI.init_parser = own_init_parser  # type: ignore[method-assign]
    fresh_parsed, fresh_parser = _parsed(argv)
    assert fresh_parser is not playbook_cli._parser
    assert kept_parsed == fresh_parsed


def test_a_wrong_command_line_is_refused_the_same_way(own_init_parser: Any, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["ansible-playbook", "--no-such-option", "p.yml"]
    kept_parsed, _ = _parsed(argv)
    kept_err = capsys.readouterr().err
    PlaybookCLI.init_parser = own_init_parser  # type: ignore[method-assign]
    fresh_parsed, _ = _parsed(argv)
    assert (kept_parsed, kept_err) == (fresh_parsed, capsys.readouterr().err)
    assert kept_parsed == ("exit", 2)
