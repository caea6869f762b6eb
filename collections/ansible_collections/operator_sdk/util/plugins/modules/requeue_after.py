#!/usr/bin/python
# -*- coding: utf-8 -*-
# Module requeue_after: asks the operator to reconcile the custom resource again after a period.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: requeue_after
short_description: Reconcile the custom resource again after a period
version_added: "0.2.0"
description:
  - Tells ansible-operator to run the reconciliation of the current custom resource again after I(time).
  - The module itself changes nothing. The operator reads the C(period) it returns from the event
    stream of the run and ends the reconciliation there, so tasks after it are not waited for.
  - Outside an operator the module only returns the period.
options:
  time:
    description:
      - How long to wait before the next reconciliation, as a Go duration made of integers with the
        units C(h), C(m), C(s) (and C(ms)), for example C(30s), C(5m) or C(1h30m).
      - Fractions such as C(1.5h) are not accepted; write C(1h30m).
    type: str
    required: true
author:
  - ansible-operator (Rust) contributors
attributes:
  check_mode:
    support: full
    description: Behaves the same; the module changes nothing.
"""

EXAMPLES = r"""
- name: Check the backup again in five minutes
  operator_sdk.util.requeue_after:
    time: 5m
"""

RETURN = r"""
period:
  description: The requested period, exactly as given in I(time).
  returned: success
  type: str
  sample: 30s
"""

import re

from ansible.module_utils.basic import AnsibleModule

# The characters the operator's duration parser accepts in this position (upstream's own check).
ALLOWED_RE = re.compile(r"^[hms0-9]*$")
# And the shape it can actually parse: one or more <integer><unit> groups, or a bare zero.
DURATION_RE = re.compile(r"^(0|([0-9]+(h|ms|m|s))+)$")


def validation_error(value):
    """Why value is not a usable period, or None when it is."""
    if not ALLOWED_RE.match(value):
        return (
            "time must contain only digits and the units h, m and s (for example 30s, 5m or 1h30m), "
            "got '%s'" % value
        )
    if not DURATION_RE.match(value):
        return "time must be a duration such as 30s, 5m or 1h30m (every number needs a unit), got '%s'" % value
    return None


def main():
    module = AnsibleModule(argument_spec=dict(time=dict(type="str", required=True)), supports_check_mode=True)
    period = module.params["time"]
    error = validation_error(period)
    if error:
        module.fail_json(msg=error)
    module.exit_json(changed=False, period=period)


if __name__ == "__main__":
    main()
