"""A stdout callback for the tests: every task result, in order, as one JSON document at the end."""

from __future__ import annotations

import json
from typing import Any

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: results_json
type: stdout
short_description: every task result as JSON, for the worker's tests
description: every task result, in order, printed as one JSON document when the play ends
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "results_json"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.results: list[dict[str, Any]] = []

    def _record(self, status: str, result: Any) -> None:
        self.results.append(
            {"task": result.task_name, "host": result._host.name, "status": status, "result": result._result}
        )

    def v2_runner_on_ok(self, result: Any) -> None:
        self._record("ok", result)

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._record("failed", result)

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._record("skipped", result)

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._display.display(json.dumps({"results": self.results}, sort_keys=True, default=str))
