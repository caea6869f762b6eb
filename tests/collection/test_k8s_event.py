"""operator_sdk.util.k8s_event against a real kube-apiserver: Events about custom resources."""

import uuid

from conftest import API_VERSION


def event_task(name, namespace, widget, **args):
    base = {
        "name": name,
        "namespace": namespace,
        "reason": "BackupStarted",
        "message": "backing up",
        "reportingComponent": "collection-tests",
        "source": {"component": "collection-tests"},
        "involvedObject": {"apiVersion": API_VERSION, "kind": "Widget", "name": widget, "namespace": namespace},
    }
    base.update(args)
    return {"operator_sdk.util.k8s_event": base}


def unique(prefix):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


def test_creates_an_event_about_a_custom_resource(run_cluster, make_widget, get_widget, core_v1, namespace):
    widget = make_widget()
    name = unique("backup")

    [result] = run_cluster([event_task(name, namespace, widget, type="Warning")])

    assert not result.get("failed"), result
    assert result["changed"] is True
    event = core_v1.read_namespaced_event(name, namespace)
    assert event.reason == "BackupStarted"
    assert event.message == "backing up"
    assert event.type == "Warning"
    assert event.count == 1
    assert event.source.component == "collection-tests"
    assert event.reporting_component == "collection-tests"
    assert event.involved_object.kind == "Widget"
    assert event.involved_object.name == widget
    assert event.involved_object.uid == get_widget(widget)["metadata"]["uid"]
    assert event.involved_object.resource_version
    assert event.first_timestamp is not None and event.last_timestamp is not None


def test_repeating_an_event_with_the_same_reason_increments_its_count(run_cluster, make_widget, core_v1, namespace):
    widget = make_widget()
    name = unique("backup")

    results = run_cluster(
        [
            event_task(name, namespace, widget, message="first"),
            event_task(name, namespace, widget, message="second"),
            event_task(name, namespace, widget, message="third"),
        ]
    )

    assert [r.get("failed", False) for r in results] == [False, False, False], results
    assert [r["result"]["count"] for r in results] == [1, 2, 3]
    event = core_v1.read_namespaced_event(name, namespace)
    assert event.count == 3
    assert event.message == "third"


def test_an_event_with_another_reason_starts_counting_again(run_cluster, make_widget, core_v1, namespace):
    widget = make_widget()
    name = unique("phase")

    run_cluster(
        [
            event_task(name, namespace, widget, reason="BackupStarted"),
            event_task(name, namespace, widget, reason="BackupStarted"),
            event_task(name, namespace, widget, reason="BackupFinished", message="done"),
        ]
    )

    event = core_v1.read_namespaced_event(name, namespace)
    assert (event.reason, event.message, event.count) == ("BackupFinished", "done", 1)


def test_append_timestamp_creates_a_new_event_each_time(run_cluster, make_widget, core_v1, namespace):
    widget = make_widget()
    name = unique("tick")

    first, second = run_cluster(
        [event_task(name, namespace, widget, appendTimestamp=True), event_task(name, namespace, widget, appendTimestamp=True)]
    )

    names = [first["result"]["metadata"]["name"], second["result"]["metadata"]["name"]]
    assert names[0] != names[1]
    assert all(n.startswith(name + ".") for n in names)
    assert [core_v1.read_namespaced_event(n, namespace).count for n in names] == [1, 1]


def test_state_absent_deletes_the_event(run_cluster, make_widget, core_v1, namespace):
    widget = make_widget()
    name = unique("gone")

    created, deleted, again = run_cluster(
        [
            event_task(name, namespace, widget),
            {"operator_sdk.util.k8s_event": {"name": name, "namespace": namespace, "state": "absent"}},
            {"operator_sdk.util.k8s_event": {"name": name, "namespace": namespace, "state": "absent"}},
        ]
    )

    assert created["changed"] is True
    assert deleted["changed"] is True
    assert again["changed"] is False
    names = [e.metadata.name for e in core_v1.list_namespaced_event(namespace).items]
    assert name not in names


def test_fails_clearly_when_the_involved_object_does_not_exist(run_cluster, namespace, test_crds):
    [result] = run_cluster([event_task(unique("orphan"), namespace, "no-such-widget")])

    assert result["failed"] is True
    assert result["msg"] == "the involved object Widget %s/no-such-widget does not exist" % namespace
