"""operator_sdk.util.osdk_metric: posts metric updates as JSON to the user-metrics endpoint."""

import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import OFFLINE_ENV, run_tasks

MODULE = Path(__file__).parents[2] / "collections/ansible_collections/operator_sdk/util/plugins/modules/osdk_metric.py"


class MetricsReceiver:
    """A local HTTP endpoint on an ephemeral port that records every request and answers as told."""

    def __init__(self):
        self.requests = []
        self.reply_status = 200
        self.reply_body = b""
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server naming)
                length = int(self.headers.get("Content-Length") or 0)
                receiver.requests.append(
                    {
                        "method": "POST",
                        "path": self.path,
                        "content_type": self.headers.get("Content-Type"),
                        "body": json.loads(self.rfile.read(length) or b"null"),
                    }
                )
                self.send_response(receiver.reply_status)
                self.send_header("Content-Length", str(len(receiver.reply_body)))
                self.end_headers()
                self.wfile.write(receiver.reply_body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = "http://127.0.0.1:%d/metrics" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    r = MetricsReceiver()
    yield r
    r.close()


def test_counter_increment_is_posted_as_json_to_the_address(run_offline, receiver):
    [result] = run_offline(
        [
            {
                "operator_sdk.util.osdk_metric": {
                    "name": "backups_total",
                    "description": "Backups taken",
                    "address": receiver.address,
                    "counter": {"increment": True},
                }
            }
        ]
    )

    assert not result.get("failed"), result
    assert receiver.requests == [
        {
            "method": "POST",
            "path": "/metrics",
            "content_type": "application/json",
            "body": {"name": "backups_total", "description": "Backups taken", "counter": {"increment": True}},
        }
    ]
    assert result["status"] == 200


def test_each_metric_type_sends_only_the_options_given(run_offline, receiver):
    base = {"address": receiver.address, "description": "d"}
    run_offline(
        [
            {"operator_sdk.util.osdk_metric": dict(base, name="g", gauge={"set": 4.5})},
            {"operator_sdk.util.osdk_metric": dict(base, name="c", counter={"add": 2})},
            {"operator_sdk.util.osdk_metric": dict(base, name="h", histogram={"observe": 0.25})},
            {"operator_sdk.util.osdk_metric": dict(base, name="s", summary={"observe": 3})},
        ]
    )

    assert [r["body"] for r in receiver.requests] == [
        {"name": "g", "description": "d", "gauge": {"set": 4.5}},
        {"name": "c", "description": "d", "counter": {"add": 2.0}},
        {"name": "h", "description": "d", "histogram": {"observe": 0.25}},
        {"name": "s", "description": "d", "summary": {"observe": 3.0}},
    ]


def test_an_error_answer_fails_the_task_with_the_response_body(run_offline, receiver):
    receiver.reply_status = 400
    receiver.reply_body = b"metric backups_total is already registered as a gauge"

    [result] = run_offline(
        [
            {
                "operator_sdk.util.osdk_metric": {
                    "name": "backups_total",
                    "description": "Backups taken",
                    "address": receiver.address,
                    "counter": {"increment": True},
                }
            }
        ]
    )

    assert result["failed"] is True
    assert "HTTP 400" in result["msg"]
    assert "metric backups_total is already registered as a gauge" in result["msg"]


def test_two_metric_types_in_one_task_are_rejected_before_sending(run_offline, receiver):
    [result] = run_offline(
        [
            {
                "operator_sdk.util.osdk_metric": {
                    "name": "x",
                    "description": "d",
                    "address": receiver.address,
                    "counter": {"increment": True},
                    "gauge": {"set": 1},
                }
            }
        ]
    )

    assert result["failed"] is True
    assert "mutually exclusive" in result["msg"]
    assert receiver.requests == []


def test_a_negative_counter_add_is_rejected(run_offline, receiver):
    [result] = run_offline(
        [
            {
                "operator_sdk.util.osdk_metric": {
                    "name": "x",
                    "description": "d",
                    "address": receiver.address,
                    "counter": {"add": -1},
                }
            }
        ]
    )

    assert result["failed"] is True
    assert "must not be negative" in result["msg"]
    assert receiver.requests == []


def test_an_unreachable_endpoint_fails_with_the_address(run_offline, receiver):
    address = receiver.address
    receiver.close()

    [result] = run_offline(
        [{"operator_sdk.util.osdk_metric": {"name": "x", "description": "d", "address": address, "gauge": {"increment": True}}}]
    )

    assert result["failed"] is True
    assert "could not reach the metrics endpoint %s" % address in result["msg"]


def test_check_mode_sends_nothing(run_offline, receiver):
    [result] = run_offline(
        [
            {
                "operator_sdk.util.osdk_metric": {
                    "name": "x",
                    "description": "d",
                    "address": receiver.address,
                    "gauge": {"set_to_current_time": True},
                },
                "check_mode": True,
            }
        ]
    )

    assert not result.get("failed"), result
    assert result["metric"] == {"name": "x", "description": "d", "gauge": {"set_to_current_time": True}}
    assert receiver.requests == []


def test_a_type_without_options_registers_the_metric_as_upstream_s_scaffold_does(run_offline, receiver):
    base = {"address": receiver.address, "description": "d"}
    results = run_offline(
        [
            {"operator_sdk.util.osdk_metric": dict(base, name="sanity_counter", counter={})},
            {"operator_sdk.util.osdk_metric": dict(base, name="sanity_gauge", gauge={})},
            {"operator_sdk.util.osdk_metric": dict(base, name="sanity_histogram", histogram={})},
            {"operator_sdk.util.osdk_metric": dict(base, name="sanity_summary", summary={})},
        ]
    )

    assert not any(r.get("failed") for r in results), results
    assert [r["body"] for r in receiver.requests] == [
        {"name": "sanity_counter", "description": "d", "counter": {}},
        {"name": "sanity_gauge", "description": "d", "gauge": {}},
        {"name": "sanity_histogram", "description": "d", "histogram": {}},
        {"name": "sanity_summary", "description": "d", "summary": {}},
    ]


def test_without_an_address_it_posts_to_the_endpoint_the_operator_gives_its_runs(receiver, tmp_path):
    port = receiver.address.split(":")[2].split("/")[0]
    env = dict(OFFLINE_ENV, ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS="127.0.0.1:%s" % port)
    task = {"operator_sdk.util.osdk_metric": {"name": "runs", "description": "Runs", "gauge": {"set": 3}}}
    [result] = run_tasks([task], tmp_path / "run", env=env)

    assert not result.get("failed"), result
    assert [request["body"] for request in receiver.requests] == [
        {"name": "runs", "description": "Runs", "gauge": {"set": 3.0}}
    ]


@pytest.mark.parametrize(
    "bound, address",
    [
        ("127.0.0.1:5051", "http://127.0.0.1:5051/metrics"),
        (":5051", "http://localhost:5051/metrics"),
        ("0.0.0.0:5051", "http://localhost:5051/metrics"),
        ("", "http://localhost:5050/metrics"),
        ("0", "http://localhost:5050/metrics"),
    ],
)
def test_the_default_address_follows_the_operators_bind_address(bound, address):
    spec = importlib.util.spec_from_file_location("osdk_metric", MODULE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.default_address({"ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS": bound}) == address
