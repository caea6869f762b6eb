"""ansible-runner's main() with the parser kept by the zygote does what it does with the one it
builds: the same run options for the command lines the operator gives, the same refusal of a
wrong one."""

from __future__ import annotations

import os
from typing import Any

import pytest
from ansible_runner import __main__ as runner_main

from ansible_operator_worker.speedups import runner_cli


class _Result:
    rc = 0


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, *, kept: bool) -> tuple[Any, dict[str, Any] | None]:
    """What main(argv) returns and the options it runs with, with or without the kept parser."""
    seen: list[dict[str, Any]] = []

    def run(**options: Any) -> _Result:
        seen.append(options)
        return _Result()

    with monkeypatch.context() as patch:
        patch.setattr(runner_main, "run", run)
        patch.setattr(runner_main, "AnsibleRunnerArgumentParser", runner_main.AnsibleRunnerArgumentParser)
        if kept:
            runner_cli.install()
        try:
            returned = runner_main.main(argv)
        except SystemExit as exit:
            returned = ("exit", exit.code)
    return returned, (seen[0] if seen else None)


@pytest.fixture(scope="module", autouse=True)
def kept_parser() -> None:
    runner_cli.build()
    assert runner_cli._parser is not None


@pytest.mark.parametrize(
    "arguments",
    [
        ["--rotate-artifacts", "1", "-p", "/opt/playbooks/validate.yml", "-i", "run-1", "-j"],
        ["--rotate-artifacts", "0", "--role", "memcached", "--roles-path", "/opt/roles/", "--hosts", "localhost",
         "-i", "run-2", "-j", "-vvv", "--role-skip-facts"],
        ["-p", "main.yml", "--limit", "web", "--forks", "3", "--cmdline", "--check --diff"],
    ],
)
def test_the_operators_command_lines_run_with_the_same_options(
    arguments: list[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["run", str(tmp_path), *arguments]
    fresh = _main(argv, monkeypatch, kept=False)
    kept = _main(argv, monkeypatch, kept=True)
    assert fresh[1] is not None and kept[1] is not None
    if "--role" in arguments:
        # ansible-runner writes a role's playbook under a new random name each time.
        for _, options in (fresh, kept):
            options["playbook"] = os.path.dirname(options["playbook"])
    assert kept == fresh


def test_a_wrong_command_line_is_refused_the_same_way(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["run", str(tmp_path), "--no-such-option"], ["run", str(tmp_path)], []):
        fresh = _main(argv, monkeypatch, kept=False)
        fresh_err = capsys.readouterr().err
        kept = _main(argv, monkeypatch, kept=True)
        assert (kept, capsys.readouterr().err) == (fresh, fresh_err)
        assert fresh[0][0] == "exit" and fresh[0][1] != 0


def test_a_run_does_not_build_the_parser(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    added: list[str] = []
    add_argument = runner_main.AnsibleRunnerArgumentParser.add_argument

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        added.append(args[0] if args else "")
        return add_argument(self, *args, **kwargs)

    monkeypatch.setattr(runner_main.AnsibleRunnerArgumentParser, "add_argument", counted)
    _main(["run", str(tmp_path), "-p", "main.yml"], monkeypatch, kept=True)
    assert added == []
    _main(["run", str(tmp_path), "-p", "main.yml"], monkeypatch, kept=False)
    assert len(added) > 20
