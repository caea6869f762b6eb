# -*- coding: utf-8 -*-
# Pure rules of k8s_status: condition validation and how desired status merges into the current one.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import copy
import datetime
import re

CONDITION_KEYS = ("type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime")
CONDITION_STATUSES = ("True", "False", "Unknown")
TIME_KEYS = ("lastHeartbeatTime", "lastTransitionTime")

# A reason is one CamelCase word: starts with an upper-case letter, then letters and digits only.
REASON_RE = re.compile(r"^[A-Z][A-Za-z0-9]*$")
RFC3339_RE = re.compile(
    r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)$"
)


class InvalidCondition(ValueError):
    """A condition that the module refuses, with a message naming the condition and the problem."""


def now_rfc3339():
    """The current UTC time in the second-precision RFC 3339 form Kubernetes uses for conditions."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _label(index, condition):
    kind = condition.get("type") if isinstance(condition, dict) else None
    if isinstance(kind, str) and kind:
        return "condition %d (type %s)" % (index, kind)
    return "condition %d" % index


def validate_condition(index, condition):
    """Returns a normalised copy of one condition (status as a string) or raises InvalidCondition."""
    if not isinstance(condition, dict):
        raise InvalidCondition("condition %d must be a dictionary, got %s" % (index, type(condition).__name__))
    label = _label(index, condition)
    unknown = sorted(k for k in condition if k not in CONDITION_KEYS)
    if unknown:
        raise InvalidCondition(
            "%s has unsupported key(s) %s; allowed keys are %s" % (label, ", ".join(unknown), ", ".join(CONDITION_KEYS))
        )
    for required in ("type", "status"):
        if condition.get(required) is None:
            raise InvalidCondition("%s is missing the required key '%s'" % (label, required))

    result = dict(condition)
    if not isinstance(result["type"], str) or not result["type"]:
        raise InvalidCondition("%s: type must be a non-empty string" % label)

    status = result["status"]
    if isinstance(status, bool):
        status = "True" if status else "False"
    if status not in CONDITION_STATUSES:
        raise InvalidCondition(
            "%s: status must be one of %s, got '%s'" % (label, ", ".join(CONDITION_STATUSES), result["status"])
        )
    result["status"] = status

    reason = result.get("reason")
    if reason is not None and (not isinstance(reason, str) or not REASON_RE.match(reason)):
        raise InvalidCondition(
            "%s: reason must be a single CamelCase word (letters and digits, starting with an upper-case "
            "letter), got '%s'" % (label, reason)
        )
    if result.get("message") is not None and not isinstance(result["message"], str):
        result["message"] = str(result["message"])
    for key in TIME_KEYS:
        value = result.get(key)
        if value is None:
            continue
        if isinstance(value, datetime.datetime):
            value = value.strftime("%Y-%m-%dT%H:%M:%SZ") if value.tzinfo is None else value.isoformat()
            result[key] = value
        if not isinstance(value, str) or not RFC3339_RE.match(value):
            raise InvalidCondition(
                "%s: %s must be an RFC 3339 time such as 2024-01-31T12:00:00Z, got '%s'" % (label, key, value)
            )
    return result


def validate_conditions(conditions):
    """Validates a list of conditions; also rejects two conditions with the same type."""
    if not isinstance(conditions, list):
        raise InvalidCondition("conditions must be a list, got %s" % type(conditions).__name__)
    result = [validate_condition(i, c) for i, c in enumerate(conditions)]
    seen = set()
    for condition in result:
        if condition["type"] in seen:
            raise InvalidCondition("condition type %s appears more than once" % condition["type"])
        seen.add(condition["type"])
    return result


def _differs_besides_transition_time(old, new):
    keys = (set(old) | set(new)) - {"lastTransitionTime"}
    return any(old.get(k) != new.get(k) for k in keys)


def merge_conditions(current, desired, now):
    """Merges desired conditions into the current list by type.

    An existing condition is replaced only when a field other than lastTransitionTime differs; its
    lastTransitionTime moves to `now` when its status changes (unless the caller gave one). New types
    are appended with lastTransitionTime `now` unless given. Types not mentioned are kept as they are.
    """
    merged = [copy.deepcopy(c) for c in (current or []) if isinstance(c, dict)]
    by_type = dict((c.get("type"), i) for i, c in enumerate(merged))
    for condition in desired:
        new = dict(condition)
        index = by_type.get(new["type"])
        if index is None:
            new.setdefault("lastTransitionTime", now)
            by_type[new["type"]] = len(merged)
            merged.append(new)
            continue
        old = merged[index]
        if not _differs_besides_transition_time(old, new):
            continue
        if "lastTransitionTime" not in new:
            same_status = old.get("status") == new["status"] and old.get("lastTransitionTime")
            new["lastTransitionTime"] = old["lastTransitionTime"] if same_status else now
        merged[index] = new
    return merged


def _merge_lists(current, desired):
    merged = list(current)
    for item in desired:
        if item not in merged:
            merged.append(copy.deepcopy(item))
    return merged


def merge_value(current, desired, replace_lists):
    """Deep-merges desired into current: dicts key by key, lists replaced or extended by missing items."""
    if isinstance(current, dict) and isinstance(desired, dict):
        merged = copy.deepcopy(current)
        for key, value in desired.items():
            merged[key] = merge_value(current.get(key), value, replace_lists) if key in current else copy.deepcopy(value)
        return merged
    if isinstance(current, list) and isinstance(desired, list) and not replace_lists:
        return _merge_lists(current, desired)
    return copy.deepcopy(desired)


def desired_status_patch(current_status, status, conditions, replace_lists, now):
    """The status keys to write for a merge (not replace) update, or None when nothing would change.

    Only top-level keys named in `status` (plus `conditions` when given) are returned, each holding its
    complete merged value, so a JSON merge patch of {"status": patch} produces the merged status.
    """
    current_status = current_status if isinstance(current_status, dict) else {}
    patch = {}
    for key, value in (status or {}).items():
        merged = merge_value(current_status[key], value, replace_lists) if key in current_status else value
        if key not in current_status or merged != current_status[key]:
            patch[key] = merged
    if conditions is not None:
        merged = merge_conditions(current_status.get("conditions"), conditions, now)
        if merged != current_status.get("conditions"):
            patch["conditions"] = merged
    return patch or None


def replacement_status(current_status, status, conditions, now):
    """The complete new status for replace=true; unchanged conditions keep their lastTransitionTime."""
    current_status = current_status if isinstance(current_status, dict) else {}
    new_status = copy.deepcopy(status or {})
    if conditions is not None:
        previous = dict((c.get("type"), c) for c in current_status.get("conditions") or [] if isinstance(c, dict))
        replaced = []
        for condition in conditions:
            new = dict(condition)
            if "lastTransitionTime" not in new:
                old = previous.get(new["type"])
                keep = old is not None and old.get("status") == new["status"] and old.get("lastTransitionTime")
                new["lastTransitionTime"] = old["lastTransitionTime"] if keep else now
            replaced.append(new)
        new_status["conditions"] = replaced
    return new_status
