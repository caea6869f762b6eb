#!/usr/bin/python
# -*- coding: utf-8 -*-
# Module osdk_metric: updates a custom metric through the operator's user-metrics endpoint.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: osdk_metric
short_description: Update a custom Prometheus metric of the operator
version_added: "0.3.0"
description:
  - Sends one update of a custom metric to ansible-operator's user-metrics endpoint, which registers the
    metric on first use and exports it with the operator's own metrics.
  - Exactly one of I(counter), I(gauge), I(histogram) and I(summary) must be given, and a metric keeps
    the type it was first used with.
  - Given without an option (C(counter: {})), the metric is registered at zero and left as it is, as
    upstream's scaffolded molecule test does before it checks C(sanity_counter 0).
options:
  name:
    description:
      - Name of the metric, for example C(my_operator_backups_total).
    type: str
    required: true
  description:
    description:
      - Help text of the metric.
    type: str
    required: true
  address:
    description:
      - URL of the user-metrics endpoint.
      - Default, the endpoint of the operator running the playbook (it sets
        C(ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS) for its runs), else upstream's
        C(http://localhost:5050/metrics).
    type: str
  counter:
    description:
      - Update a counter with I(increment) or I(add); empty, only register it.
    type: dict
    suboptions:
      increment:
        description: Add one.
        type: bool
      add:
        description: Add this non-negative value.
        type: float
  gauge:
    description:
      - Update a gauge. Give one of the options; if several are given, the first in the order listed wins.
        Empty, only register it.
    type: dict
    suboptions:
      increment:
        description: Add one.
        type: bool
      decrement:
        description: Subtract one.
        type: bool
      add:
        description: Add this value.
        type: float
      subtract:
        description: Subtract this value.
        type: float
      set:
        description: Set to this value.
        type: float
      set_to_current_time:
        description: Set to the current Unix time in seconds.
        type: bool
  histogram:
    description:
      - Record an observation in a histogram; empty, only register it.
    type: dict
    suboptions:
      observe:
        description: The observed value.
        type: float
  summary:
    description:
      - Record an observation in a summary; empty, only register it.
    type: dict
    suboptions:
      observe:
        description: The observed value.
        type: float
attributes:
  check_mode:
    support: full
    description: Returns the document that would be sent, without sending it.
author:
  - ansible-operator (Rust) contributors
"""

EXAMPLES = r"""
- name: Count backups
  operator_sdk.util.osdk_metric:
    name: my_operator_backups_total
    description: Backups taken by the operator
    counter:
      increment: true

- name: Record how long the backup took
  operator_sdk.util.osdk_metric:
    name: my_operator_backup_seconds
    description: Duration of backups
    histogram:
      observe: "{{ backup_seconds }}"

- name: Register a counter at zero
  operator_sdk.util.osdk_metric:
    name: sanity_counter
    description: Registered by the test role
    counter: {}
"""

RETURN = r"""
metric:
  description: The JSON document that was sent (or would be sent, in check mode).
  returned: success
  type: dict
  sample: {"name": "my_operator_backups_total", "description": "Backups taken", "counter": {"increment": true}}
status:
  description: HTTP status of the endpoint's answer; absent in check mode.
  returned: when sent
  type: int
  sample: 200
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from urllib.error import HTTPError, URLError
from urllib.request import Request, urlopen

METRIC_TYPES = ("counter", "gauge", "histogram", "summary")
TIMEOUT_SECONDS = 10
UPSTREAM_ADDRESS = "http://localhost:5050/metrics"
BIND_ADDRESS_ENV = "ANSIBLE_OPERATOR_USER_METRICS_BIND_ADDRESS"


def argument_spec():
    observe = dict(observe=dict(type="float"))
    return dict(
        name=dict(type="str", required=True),
        description=dict(type="str", required=True),
        address=dict(type="str"),
        counter=dict(type="dict", options=dict(increment=dict(type="bool"), add=dict(type="float"))),
        gauge=dict(
            type="dict",
            options=dict(
                increment=dict(type="bool"),
                decrement=dict(type="bool"),
                add=dict(type="float"),
                subtract=dict(type="float"),
                set=dict(type="float"),
                set_to_current_time=dict(type="bool"),
            ),
        ),
        histogram=dict(type="dict", options=dict(observe)),
        summary=dict(type="dict", options=dict(observe)),
    )


def default_address(environ):
    """The endpoint of the operator running the playbook, from the bind address it gives its runs
    (``127.0.0.1:5050``, ``:5050``, ``0.0.0.0:5050``), else upstream's fixed one."""
    bound = environ.get(BIND_ADDRESS_ENV, "")
    host, _, port = bound.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return UPSTREAM_ADDRESS
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "localhost"
    return "http://%s:%s/metrics" % (host, port)


def metric_document(params):
    """The JSON body for the endpoint, or raises ValueError when the metric update is not meaningful.

    A type without options (``counter: {}``) is sent empty: the endpoint registers the metric at zero,
    as upstream's does.
    """
    metric_type = next(t for t in METRIC_TYPES if params[t] is not None)
    update = dict((k, v) for k, v in params[metric_type].items() if v is not None and v is not False)
    if metric_type == "counter" and update.get("add", 0) < 0:
        raise ValueError("counter.add must not be negative (a counter only goes up), got %s" % update["add"])
    return {"name": params["name"], "description": params["description"], metric_type: update}


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        mutually_exclusive=[METRIC_TYPES],
        required_one_of=[METRIC_TYPES],
        supports_check_mode=True,
    )
    try:
        document = metric_document(module.params)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    if module.check_mode:
        module.exit_json(changed=True, metric=document)

    address = module.params["address"] or default_address(os.environ)
    request = Request(
        address,
        data=json.dumps(document).encode("utf-8"),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        response = urlopen(request, timeout=TIMEOUT_SECONDS)
        status = response.getcode()
        body = response.read().decode("utf-8", "replace").strip()
    except HTTPError as exc:
        body = exc.read().decode("utf-8", "replace").strip()
        module.fail_json(
            msg="the metrics endpoint %s rejected metric %s: HTTP %d: %s" % (address, document["name"], exc.code, body),
            status=exc.code,
            metric=document,
        )
    except (URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        module.fail_json(msg="could not reach the metrics endpoint %s: %s" % (address, reason), metric=document)
    if not 200 <= status < 300:
        module.fail_json(
            msg="the metrics endpoint %s rejected metric %s: HTTP %d: %s" % (address, document["name"], status, body),
            status=status,
            metric=document,
        )
    module.exit_json(changed=True, metric=document, status=status)


if __name__ == "__main__":
    main()
