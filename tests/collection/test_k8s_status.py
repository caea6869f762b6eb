"""operator_sdk.util.k8s_status against a real kube-apiserver: status keys, conditions, validation."""

import pytest
from conftest import API_VERSION, GROUP, VERSION


def status_task(name, namespace, **args):
    return {
        "operator_sdk.util.k8s_status": dict(
            {"api_version": API_VERSION, "kind": "Widget", "name": name, "namespace": namespace}, **args
        )
    }


def by_type(conditions):
    return {c["type"]: c for c in conditions}


def test_sets_custom_status_keys_on_a_custom_resource(run_cluster, make_widget, get_widget, namespace):
    name = make_widget()

    [result] = run_cluster([status_task(name, namespace, status={"phase": "Deploying", "replicas": 3})])

    assert not result.get("failed"), result
    assert result["changed"] is True
    assert result["result"]["status"] == {"phase": "Deploying", "replicas": 3}
    assert get_widget(name)["status"] == {"phase": "Deploying", "replicas": 3}


def test_merges_new_status_keys_into_existing_ones(run_cluster, make_widget, get_widget, namespace):
    name = make_widget(status={"phase": "Old", "nodes": {"a": 1}, "keep": True})

    [result] = run_cluster([status_task(name, namespace, status={"phase": "New", "nodes": {"b": 2}})])

    assert not result.get("failed"), result
    assert get_widget(name)["status"] == {"phase": "New", "nodes": {"a": 1, "b": 2}, "keep": True}


def test_lists_are_extended_unless_replace_lists_is_set(run_cluster, make_widget, get_widget, namespace):
    extended = make_widget(status={"hosts": ["a", "b"]})
    replaced = make_widget(status={"hosts": ["a", "b"]})

    run_cluster(
        [
            status_task(extended, namespace, status={"hosts": ["b", "c"]}),
            status_task(replaced, namespace, status={"hosts": ["b", "c"]}, replace_lists=True),
        ]
    )

    assert get_widget(extended)["status"]["hosts"] == ["a", "b", "c"]
    assert get_widget(replaced)["status"]["hosts"] == ["b", "c"]


def test_sets_custom_conditions_with_a_transition_time(run_cluster, make_widget, get_widget, namespace):
    name = make_widget()

    [result] = run_cluster(
        [
            status_task(
                name,
                namespace,
                conditions=[
                    {"type": "DatabaseReady", "status": False, "reason": "WaitingForPods", "message": "1 of 3 ready"}
                ],
            )
        ]
    )

    assert not result.get("failed"), result
    [condition] = get_widget(name)["status"]["conditions"]
    assert condition["type"] == "DatabaseReady"
    assert condition["status"] == "False"
    assert condition["reason"] == "WaitingForPods"
    assert condition["message"] == "1 of 3 ready"
    assert condition["lastTransitionTime"].endswith("Z")


def test_merges_conditions_by_type_and_keeps_other_types(run_cluster, make_widget, get_widget, namespace):
    earlier = "2020-01-01T00:00:00Z"
    name = make_widget(
        status={
            "conditions": [
                {"type": "Running", "status": "True", "reason": "Running", "lastTransitionTime": earlier},
                {"type": "DatabaseReady", "status": "False", "reason": "Waiting", "lastTransitionTime": earlier},
                {"type": "CacheReady", "status": "True", "reason": "Ready", "lastTransitionTime": earlier},
            ]
        }
    )

    [result] = run_cluster(
        [
            status_task(
                name,
                namespace,
                conditions=[
                    {"type": "DatabaseReady", "status": "True", "reason": "Ready"},
                    {"type": "CacheReady", "status": "True", "reason": "Ready", "message": "warm"},
                    {"type": "Backup", "status": "Unknown"},
                ],
            )
        ]
    )

    assert not result.get("failed"), result
    conditions = get_widget(name)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Running", "DatabaseReady", "CacheReady", "Backup"]
    merged = by_type(conditions)
    assert merged["Running"]["lastTransitionTime"] == earlier, "untouched type keeps its time"
    assert merged["DatabaseReady"]["status"] == "True"
    assert merged["DatabaseReady"]["lastTransitionTime"] != earlier, "status change moves the time"
    assert merged["CacheReady"]["message"] == "warm"
    assert merged["CacheReady"]["lastTransitionTime"] == earlier, "same status keeps the time"
    assert merged["Backup"]["status"] == "Unknown"


def test_repeating_the_same_update_reports_no_change(run_cluster, make_widget, get_widget, namespace):
    name = make_widget()
    task = status_task(
        name,
        namespace,
        status={"phase": "Ready", "nodes": ["a"]},
        conditions=[{"type": "DatabaseReady", "status": True, "reason": "Ready"}],
    )

    first, second = run_cluster([task, task])

    assert first["changed"] is True, first
    assert second["changed"] is False, second
    assert second["result"]["metadata"]["resourceVersion"] == get_widget(name)["metadata"]["resourceVersion"]


def test_replace_overwrites_the_whole_status(run_cluster, make_widget, get_widget, namespace):
    name = make_widget(status={"phase": "Old", "extra": 1})

    [result] = run_cluster([status_task(name, namespace, status={"phase": "Reset"}, force=True)])

    assert not result.get("failed"), result
    assert get_widget(name)["status"] == {"phase": "Reset"}


def test_check_mode_reports_the_change_without_writing(run_cluster, make_widget, get_widget, namespace):
    name = make_widget(status={"phase": "Old"})

    [result] = run_cluster([dict(status_task(name, namespace, status={"phase": "New"}), check_mode=True)])

    assert result["changed"] is True, result
    assert result["result"]["status"]["phase"] == "New"
    assert get_widget(name)["status"] == {"phase": "Old"}


@pytest.mark.parametrize(
    "condition, message",
    [
        ({"type": "Ready", "status": "Maybe"}, "status must be one of True, False, Unknown, got 'Maybe'"),
        ({"type": "Ready", "status": "True", "reason": "not camel case"}, "reason must be a single CamelCase word"),
        ({"status": "True", "reason": "Ready"}, "is missing the required key 'type'"),
        ({"type": "Ready", "status": "True", "color": "blue"}, "unsupported key(s) color"),
        ({"type": "Ready", "status": "True", "lastTransitionTime": "yesterday"}, "must be an RFC 3339 time"),
    ],
    ids=["bad-status", "bad-reason", "missing-type", "unknown-key", "bad-time"],
)
def test_invalid_conditions_are_rejected_with_a_clear_message(
    run_cluster, make_widget, get_widget, namespace, condition, message
):
    name = make_widget(status={"phase": "Untouched"})

    [result] = run_cluster([status_task(name, namespace, conditions=[condition])])

    assert result["failed"] is True
    assert "invalid conditions" in result["msg"]
    assert message in result["msg"]
    assert get_widget(name)["status"] == {"phase": "Untouched"}


def test_conditions_given_twice_are_rejected(run_cluster, make_widget, namespace):
    name = make_widget()

    [result] = run_cluster(
        [
            status_task(
                name,
                namespace,
                status={"conditions": [{"type": "A", "status": "True"}]},
                conditions=[{"type": "B", "status": "True"}],
            )
        ]
    )

    assert result["failed"] is True
    assert "both in 'conditions' and in 'status.conditions'" in result["msg"]


def test_fails_clearly_for_a_kind_without_the_status_subresource(run_cluster, custom_objects, namespace, test_crds):
    custom_objects.create_namespaced_custom_object(
        GROUP, VERSION, namespace, "gadgets", {"apiVersion": API_VERSION, "kind": "Gadget", "metadata": {"name": "g"}}
    )

    [result] = run_cluster(
        [
            {
                "operator_sdk.util.k8s_status": {
                    "api_version": API_VERSION,
                    "kind": "Gadget",
                    "name": "g",
                    "namespace": namespace,
                    "status": {"phase": "Ready"},
                }
            }
        ]
    )

    assert result["failed"] is True
    assert "Gadget %s does not support the status subresource" % API_VERSION in result["msg"]


def test_fails_clearly_when_the_object_does_not_exist(run_cluster, namespace, test_crds):
    [result] = run_cluster([status_task("missing", namespace, status={"phase": "Ready"})])

    assert result["failed"] is True
    assert result["msg"] == "Widget %s/missing not found" % namespace
