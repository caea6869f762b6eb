#!/usr/bin/python
# -*- coding: utf-8 -*-
# Module k8s_status: writes keys and conditions to a resource's /status subresource.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_status
short_description: Update the status of a Kubernetes resource
version_added: "0.1.0"
description:
  - Writes to the C(/status) subresource of a Kubernetes object, typically the custom resource an
    operator is reconciling.
  - By default the given I(status) keys are merged into the current status and the given I(conditions)
    are merged by C(type); nothing is written (and C(changed) is false) when the object already has them.
  - With I(replace=true) the whole status is replaced.
  - The resource's kind must have the status subresource enabled.
options:
  api_version:
    description:
      - API version of the object, for example C(cache.example.com/v1alpha1).
    type: str
    default: v1
    aliases: [api, version]
  kind:
    description:
      - Kind of the object, for example C(Memcached).
    type: str
    required: true
  name:
    description:
      - Name of the object.
    type: str
    required: true
  namespace:
    description:
      - Namespace of the object; required for namespaced kinds.
    type: str
  status:
    description:
      - Keys to write under C(.status). Nested dictionaries are merged key by key unless I(replace=true).
      - May hold C(conditions) only when I(conditions) is not given; they are then treated the same way.
    type: dict
  conditions:
    description:
      - Conditions to write under C(.status.conditions), merged with the existing ones by C(type).
      - An existing condition is replaced only if a field other than C(lastTransitionTime) differs.
        C(lastTransitionTime) defaults to now for new conditions and for conditions whose C(status) changes.
      - Allowed keys are C(type), C(status), C(reason), C(message), C(lastHeartbeatTime) and
        C(lastTransitionTime). C(type) and C(status) are required; C(status) is C(True), C(False) or
        C(Unknown) (a boolean is converted); C(reason) is a single CamelCase word; times are RFC 3339.
    type: list
    elements: dict
  replace:
    description:
      - Replace the whole status with I(status) and I(conditions) instead of merging into it.
    type: bool
    default: false
    aliases: [force]
  replace_lists:
    description:
      - When merging, replace lists found in I(status) instead of appending the items they lack.
    type: bool
    default: false
extends_documentation_fragment:
  - operator_sdk.util.auth
attributes:
  check_mode:
    support: full
    description: Reports whether the status would change and returns the object as it would be, without writing.
author:
  - ansible-operator (Rust) contributors
"""

EXAMPLES = r"""
- name: Report progress on the custom resource being reconciled
  operator_sdk.util.k8s_status:
    api_version: cache.example.com/v1alpha1
    kind: Memcached
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    status:
      replicas: 3
      phase: Deploying

- name: Set a custom condition
  operator_sdk.util.k8s_status:
    api_version: cache.example.com/v1alpha1
    kind: Memcached
    name: "{{ ansible_operator_meta.name }}"
    namespace: "{{ ansible_operator_meta.namespace }}"
    conditions:
      - type: DatabaseReady
        status: "False"
        reason: WaitingForPods
        message: 1 of 3 pods are ready

- name: Replace the whole status
  operator_sdk.util.k8s_status:
    api_version: cache.example.com/v1alpha1
    kind: Memcached
    name: example
    namespace: default
    replace: true
    status:
      phase: Reset
"""

RETURN = r"""
result:
  description: The object as returned by the API server after the update (or as it would be, in check mode).
  returned: success
  type: dict
  contains:
    apiVersion:
      description: API version of the object.
      type: str
    kind:
      description: Kind of the object.
      type: str
    metadata:
      description: Metadata of the object.
      type: dict
    spec:
      description: Spec of the object, when it has one.
      type: dict
    status:
      description: The object's status.
      type: dict
"""

import copy

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.operator_sdk.util.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC,
    api_error_message,
    dynamic_client,
    find_resource,
    is_api_error,
)
from ansible_collections.operator_sdk.util.plugins.module_utils.status_merge import (
    InvalidCondition,
    desired_status_patch,
    now_rfc3339,
    replacement_status,
    validate_conditions,
)

# Attempts at a write that loses an optimistic-concurrency race against another writer of the status.
MAX_CONFLICT_RETRIES = 5


def argument_spec():
    spec = dict(
        api_version=dict(type="str", default="v1", aliases=["api", "version"]),
        kind=dict(type="str", required=True),
        name=dict(type="str", required=True),
        namespace=dict(type="str"),
        status=dict(type="dict"),
        conditions=dict(type="list", elements="dict"),
        replace=dict(type="bool", default=False, aliases=["force"]),
        replace_lists=dict(type="bool", default=False),
    )
    spec.update(copy.deepcopy(AUTH_ARG_SPEC))
    return spec


def desired_inputs(module):
    """The status keys and validated conditions to write; fails the task on invalid input."""
    status = copy.deepcopy(module.params["status"]) if module.params["status"] is not None else None
    conditions = module.params["conditions"]
    if status is not None and "conditions" in status:
        if conditions is not None:
            module.fail_json(
                msg="conditions are given both in 'conditions' and in 'status.conditions'; use only one of them"
            )
        conditions = status.pop("conditions")
    if status is None and conditions is None and not module.params["replace"]:
        module.fail_json(msg="nothing to do: give status, conditions, or both")
    if conditions is not None:
        try:
            conditions = validate_conditions(conditions)
        except InvalidCondition as exc:
            module.fail_json(msg="invalid conditions: %s" % exc)
    return status, conditions


def plan_update(current, status, conditions, replace, replace_lists, now):
    """(object as it will be, request body) for the status write, or None when nothing would change.

    Both bodies carry the resourceVersion that was read, so the server rejects the write with a
    conflict if the status moved in between and merged lists never drop a concurrent update.
    """
    current_status = current.get("status") or {}
    preview = copy.deepcopy(current)
    if replace:
        new_status = replacement_status(current_status, status, conditions, now)
        if new_status == current_status:
            return None
        preview["status"] = new_status
        return preview, preview
    patch = desired_status_patch(current_status, status, conditions, replace_lists, now)
    if patch is None:
        return None
    preview["status"] = dict(current_status, **patch)
    body = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "status": patch}
    return preview, body


def main():
    module = AnsibleModule(argument_spec=argument_spec(), supports_check_mode=True)
    status, conditions = desired_inputs(module)
    params = module.params
    api_version, kind, name = params["api_version"], params["kind"], params["name"]

    client = dynamic_client(module)
    resource = find_resource(module, client, api_version, kind)
    status_resource = (resource.subresources or {}).get("status")
    if status_resource is None:
        # Discovery may be cached from before the CRD gained its status subresource: look once more.
        client.resources.invalidate_cache()
        resource = find_resource(module, client, api_version, kind)
        status_resource = (resource.subresources or {}).get("status")
    if status_resource is None:
        module.fail_json(
            msg="%s %s does not support the status subresource; enable it in the CRD "
            "(spec.versions[].subresources.status: {})" % (kind, api_version)
        )
    namespace = params["namespace"] if resource.namespaced else None
    if resource.namespaced and not namespace:
        module.fail_json(msg="namespace is required for the namespaced kind %s" % kind)
    what = "%s %s%s" % (kind, (namespace + "/") if namespace else "", name)

    for _attempt in range(MAX_CONFLICT_RETRIES):
        try:
            current = client.get(resource, name=name, namespace=namespace).to_dict()
        except Exception as exc:
            if is_api_error(exc, 404):
                module.fail_json(msg="%s not found" % what)
            if is_api_error(exc):
                module.fail_json(msg="reading %s failed: %s" % (what, api_error_message(exc)))
            raise

        planned = plan_update(current, status, conditions, params["replace"], params["replace_lists"], now_rfc3339())
        if planned is None:
            module.exit_json(changed=False, result=current)
        preview, body = planned
        if module.check_mode:
            module.exit_json(changed=True, result=preview)

        try:
            if params["replace"]:
                written = status_resource.replace(body=body, name=name, namespace=namespace)
            else:
                written = status_resource.patch(
                    body=body, name=name, namespace=namespace, content_type="application/merge-patch+json"
                )
        except Exception as exc:
            if is_api_error(exc, 409):
                continue
            if is_api_error(exc):
                module.fail_json(msg="updating the status of %s failed: %s" % (what, api_error_message(exc)))
            raise
        module.exit_json(changed=True, result=written.to_dict())

    module.fail_json(
        msg="updating the status of %s failed: it kept changing concurrently (%d attempts)"
        % (what, MAX_CONFLICT_RETRIES)
    )


if __name__ == "__main__":
    main()
