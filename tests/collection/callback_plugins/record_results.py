"""Test-only callback: writes every task result of the play, in order, to $RECORD_RESULTS_FILE as JSON."""

from __future__ import annotations

import json
import os

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: record_results
type: aggregate
short_description: record task results for the collection tests
description:
  - Writes the list of task results to the file named by the RECORD_RESULTS_FILE environment variable.
requirements:
  - enabled with ANSIBLE_CALLBACKS_ENABLED=record_results
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "record_results"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.results = []

    def _record(self, result, status):
        data = getattr(result, "result", None)
        if data is None:
            data = result._result
        recorded = json.loads(self._dump_results(data, keep_invocation=True))
        recorded.setdefault("failed", status == "failed")
        recorded["_task"] = result.task_name if hasattr(result, "task_name") else result._task.get_name()
        self.results.append(recorded)

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_playbook_on_stats(self, stats):
        with open(os.environ["RECORD_RESULTS_FILE"], "w") as out:
            json.dump(self.results, out)
