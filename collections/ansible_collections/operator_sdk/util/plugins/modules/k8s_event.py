#!/usr/bin/python
# -*- coding: utf-8 -*-
# Module k8s_event: records a core/v1 Event about an object, counting repeats of the same reason.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
module: k8s_event
short_description: Create or update a Kubernetes Event
version_added: "0.1.0"
description:
  - Creates a core/v1 Event, usually about the custom resource an operator is reconciling, so that it
    shows in C(kubectl describe) and C(kubectl get events).
  - When an Event of that name already exists with the same I(reason), its C(count) is incremented and
    its C(lastTimestamp), C(message) and C(type) are updated instead. An existing Event with another
    reason is replaced by a fresh one.
  - With I(state=absent) the Event is deleted.
options:
  state:
    description:
      - Whether the Event should exist.
    type: str
    choices: [present, absent]
    default: present
  name:
    description:
      - Name of the Event.
    type: str
    required: true
  namespace:
    description:
      - Namespace of the Event; for a namespaced I(involvedObject) it must be the object's namespace.
    type: str
    required: true
  message:
    description:
      - Human-readable description of what happened. Required with I(state=present).
    type: str
  reason:
    description:
      - Short CamelCase reason, for example C(ScalingReplicaSet). Required with I(state=present).
    type: str
  reportingComponent:
    description:
      - Name of the controller that emitted the Event (the C(reportingComponent) field).
    type: str
  type:
    description:
      - Type of the Event.
    type: str
    choices: [Normal, Warning]
    default: Normal
  appendTimestamp:
    description:
      - Append a timestamp to I(name), so that every run creates a new Event instead of counting.
    type: bool
    default: false
  source:
    description:
      - The component reporting the Event (the C(source) field).
    type: dict
    suboptions:
      component:
        description: Name of the component.
        type: str
  involvedObject:
    description:
      - The object the Event is about. Its C(uid) and C(resourceVersion) are looked up in the cluster.
    type: dict
    suboptions:
      apiVersion:
        description: API version of the object.
        type: str
        required: true
      kind:
        description: Kind of the object.
        type: str
        required: true
      name:
        description: Name of the object.
        type: str
        required: true
      namespace:
        description: Namespace of the object; defaults to I(namespace) for namespaced kinds.
        type: str
  merge_type:
    description:
      - Patch strategies tried, in order, when updating an existing Event.
      - Defaults to C(strategic-merge), then C(merge).
    type: list
    elements: str
    choices: [json, merge, strategic-merge]
extends_documentation_fragment:
  - operator_sdk.util.auth
attributes:
  check_mode:
    support: full
    description: Returns the Event as it would be written, without writing or deleting anything.
author:
  - ansible-operator (Rust) contributors
"""

EXAMPLES = r"""
- name: Tell users that the database is being backed up
  operator_sdk.util.k8s_event:
    name: "{{ ansible_operator_meta.name }}-backup"
    namespace: "{{ ansible_operator_meta.namespace }}"
    reason: BackupStarted
    message: Backing up the database before the upgrade
    reportingComponent: memcached-operator
    source:
      component: memcached-operator
    involvedObject:
      apiVersion: cache.example.com/v1alpha1
      kind: Memcached
      name: "{{ ansible_operator_meta.name }}"
      namespace: "{{ ansible_operator_meta.namespace }}"

- name: Warn with a new Event on every run
  operator_sdk.util.k8s_event:
    name: quota-warning
    namespace: default
    type: Warning
    reason: QuotaAlmostReached
    message: 90% of the quota is used
    appendTimestamp: true
"""

RETURN = r"""
result:
  description: The Event as returned by the API server (or as it would be, in check mode); empty after deletion.
  returned: success
  type: dict
  contains:
    count:
      description: How many times the Event occurred.
      type: int
    reason:
      description: Reason of the Event.
      type: str
    message:
      description: Message of the Event.
      type: str
    involvedObject:
      description: Reference to the object the Event is about.
      type: dict
"""

import copy
import datetime
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.operator_sdk.util.plugins.module_utils.k8s_client import (
    AUTH_ARG_SPEC,
    api_error_message,
    dynamic_client,
    find_resource,
    is_api_error,
)

PATCH_CONTENT_TYPES = {
    "json": "application/json-patch+json",
    "merge": "application/merge-patch+json",
    "strategic-merge": "application/strategic-merge-patch+json",
}


def argument_spec():
    spec = dict(
        state=dict(type="str", choices=["present", "absent"], default="present"),
        name=dict(type="str", required=True),
        namespace=dict(type="str", required=True),
        message=dict(type="str"),
        reason=dict(type="str"),
        reportingComponent=dict(type="str"),
        type=dict(type="str", choices=["Normal", "Warning"], default="Normal"),
        appendTimestamp=dict(type="bool", default=False),
        source=dict(type="dict", options=dict(component=dict(type="str"))),
        involvedObject=dict(
            type="dict",
            options=dict(
                apiVersion=dict(type="str", required=True),
                kind=dict(type="str", required=True),
                name=dict(type="str", required=True),
                namespace=dict(type="str"),
            ),
        ),
        merge_type=dict(type="list", elements="str", choices=list(PATCH_CONTENT_TYPES)),
    )
    spec.update(copy.deepcopy(AUTH_ARG_SPEC))
    return spec


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def involved_object_reference(module, client):
    """The involvedObject with uid and resourceVersion read from the cluster, or None when not given."""
    wanted = module.params["involvedObject"]
    if not wanted:
        return None
    resource = find_resource(module, client, wanted["apiVersion"], wanted["kind"])
    namespace = (wanted.get("namespace") or module.params["namespace"]) if resource.namespaced else None
    what = "%s %s%s" % (wanted["kind"], (namespace + "/") if namespace else "", wanted["name"])
    try:
        obj = client.get(resource, name=wanted["name"], namespace=namespace).to_dict()
    except Exception as exc:
        if is_api_error(exc, 404):
            module.fail_json(msg="the involved object %s does not exist" % what)
        if is_api_error(exc):
            module.fail_json(msg="reading the involved object %s failed: %s" % (what, api_error_message(exc)))
        raise
    reference = {
        "apiVersion": wanted["apiVersion"],
        "kind": wanted["kind"],
        "name": wanted["name"],
        "uid": obj["metadata"]["uid"],
        "resourceVersion": obj["metadata"]["resourceVersion"],
    }
    if namespace:
        reference["namespace"] = namespace
    return reference


def new_event(params, name, involved, now):
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": params["namespace"]},
        "reason": params["reason"],
        "message": params["message"],
        "type": params["type"],
        "count": 1,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "involvedObject": involved or {},
    }
    if params["reportingComponent"]:
        event["reportingComponent"] = params["reportingComponent"]
    if params["source"] and params["source"].get("component"):
        event["source"] = {"component": params["source"]["component"]}
    return event


def repeat_patch(params, existing, involved, now):
    """The fields that change when an Event with the same reason happens again."""
    patch = {
        "count": (existing.get("count") or 1) + 1,
        "lastTimestamp": now,
        "message": params["message"],
        "type": params["type"],
    }
    if involved:
        patch["involvedObject"] = involved
    return patch


def patch_event(module, events, name, namespace, patch):
    """Applies patch with the first merge type the server accepts."""
    errors = []
    for merge_type in module.params["merge_type"] or ["strategic-merge", "merge"]:
        if merge_type == "json":
            body = [{"op": "add", "path": "/" + key, "value": value} for key, value in patch.items()]
        else:
            body = patch
        try:
            return events.patch(
                body=body, name=name, namespace=namespace, content_type=PATCH_CONTENT_TYPES[merge_type]
            ).to_dict()
        except Exception as exc:
            if not is_api_error(exc):
                raise
            errors.append("%s: %s" % (merge_type, api_error_message(exc)))
    module.fail_json(msg="updating Event %s/%s failed: %s" % (namespace, name, "; ".join(errors)))


def main():
    module = AnsibleModule(
        argument_spec=argument_spec(),
        required_if=[("state", "present", ("message", "reason"))],
        supports_check_mode=True,
    )
    params = module.params
    namespace = params["namespace"]
    name = params["name"]
    if params["appendTimestamp"]:
        # Hex nanoseconds, as Kubernetes' own event recorder names events: unique and a valid name.
        name = "%s.%x" % (name, time.time_ns())

    client = dynamic_client(module)
    events = find_resource(module, client, "v1", "Event")
    try:
        existing = events.get(name=name, namespace=namespace).to_dict()
    except Exception as exc:
        if not is_api_error(exc, 404):
            if is_api_error(exc):
                module.fail_json(msg="reading Event %s/%s failed: %s" % (namespace, name, api_error_message(exc)))
            raise
        existing = None

    if params["state"] == "absent":
        if existing is None:
            module.exit_json(changed=False, result={})
        if not module.check_mode:
            try:
                events.delete(name=name, namespace=namespace)
            except Exception as exc:
                if not is_api_error(exc, 404):
                    if is_api_error(exc):
                        module.fail_json(msg="deleting Event %s/%s failed: %s" % (namespace, name, api_error_message(exc)))
                    raise
        module.exit_json(changed=True, result={})

    involved = involved_object_reference(module, client)
    now = now_rfc3339()
    try:
        if existing is not None and existing.get("reason") == params["reason"]:
            patch = repeat_patch(params, existing, involved, now)
            if module.check_mode:
                module.exit_json(changed=True, result=dict(existing, **patch))
            module.exit_json(changed=True, result=patch_event(module, events, name, namespace, patch))
        event = new_event(params, name, involved, now)
        if module.check_mode:
            module.exit_json(changed=True, result=event)
        if existing is None:
            result = events.create(body=event, namespace=namespace).to_dict()
        else:
            event["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            result = events.replace(body=event, name=name, namespace=namespace).to_dict()
    except Exception as exc:
        if is_api_error(exc):
            module.fail_json(msg="writing Event %s/%s failed: %s" % (namespace, name, api_error_message(exc)))
        raise
    module.exit_json(changed=True, result=result)


if __name__ == "__main__":
    main()
