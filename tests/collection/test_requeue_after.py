"""operator_sdk.util.requeue_after: validates the period and returns it for the operator to read."""

import json
import os
import subprocess

import pytest
import yaml
from conftest import PLAYBOOK_TIMEOUT_SECONDS, VENV_BIN


def test_returns_the_period_unchanged_and_reports_no_change(run_offline):
    [result] = run_offline([{"operator_sdk.util.requeue_after": {"time": "30s"}}])

    assert not result.get("failed"), result
    assert result["period"] == "30s"
    assert result["changed"] is False


def test_accepts_compound_durations(run_offline):
    results = run_offline(
        [{"operator_sdk.util.requeue_after": {"time": t}} for t in ("1h30m", "500ms", "0")]
    )

    assert [r.get("failed", False) for r in results] == [False, False, False], results
    assert [r["period"] for r in results] == ["1h30m", "500ms", "0"]


@pytest.mark.parametrize(
    "period, expected",
    [
        ("1.5h", "time must contain only digits and the units h, m and s"),
        ("10 minutes", "time must contain only digits and the units h, m and s"),
        ("90", "every number needs a unit"),
    ],
)
def test_rejects_periods_the_operator_cannot_parse_with_a_clear_message(run_offline, period, expected):
    [result] = run_offline([{"operator_sdk.util.requeue_after": {"time": period}}])

    assert result["failed"] is True
    assert expected in result["msg"]
    assert repr(period) in result["msg"] or "'%s'" % period in result["msg"]
    assert "period" not in result


def test_requires_time(run_offline):
    [result] = run_offline([{"operator_sdk.util.requeue_after": {}}])

    assert result["failed"] is True
    assert "time" in result["msg"]


def test_ansible_runner_events_carry_the_action_name_and_period_the_operator_reads(tmp_path):
    """The operator finds requeue_after in `ansible-runner run -j` output (reference §6.3)."""
    project = tmp_path / "project"
    project.mkdir()
    (project / "playbook.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [{"operator_sdk.util.requeue_after": {"time": "30s"}}],
                }
            ]
        )
    )
    # ansible-runner starts `ansible-playbook` from PATH, so the venv's bin directory must come first.
    env = dict(
        os.environ,
        PATH="%s%s%s" % (VENV_BIN, os.pathsep, os.environ.get("PATH", "")),
        ANSIBLE_LOCALHOST_WARNING="False",
        ANSIBLE_INVENTORY_UNPARSED_WARNING="False",
    )
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-runner"), "run", str(tmp_path), "-p", "playbook.yml", "-j"],
        env=env,
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_SECONDS,
    )

    assert proc.returncode == 0, proc.stdout + proc.stderr
    events = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    [ok] = [e for e in events if e.get("event") == "runner_on_ok"]
    assert ok["event_data"]["task_action"] == "operator_sdk.util.requeue_after"
    assert ok["event_data"]["res"]["period"] == "30s"
