"""Fixtures for the operator_sdk.util collection tests: playbook runs, a real API server, test CRDs.

Run with `.venv/bin/python -m pytest tests/collection -q` after `hack/install-ansible.sh`; the venv whose
Python runs pytest is the one tested (`.venv-2.19/bin/python -m pytest ...` tests the newer toolchain). The cluster
tests use the kube-apiserver named by $KUBECONFIG (default: the local control plane's
`.local/cluster/kubeconfig`) and are skipped when there is no kubeconfig at all.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DEFAULT_KUBECONFIG = REPO / ".local" / "cluster" / "kubeconfig"
CALLBACK_PLUGINS = Path(__file__).resolve().parent / "callback_plugins"

GROUP = "collection.test.example.com"
VERSION = "v1"
API_VERSION = GROUP + "/" + VERSION
# Kind with the status subresource, and one without it.
WITH_STATUS = dict(kind="Widget", plural="widgets")
WITHOUT_STATUS = dict(kind="Gadget", plural="gadgets")

PLAYBOOK_TIMEOUT_SECONDS = 180
# Environment shared by every ansible process the tests start (results callback, quiet localhost).
ANSIBLE_TEST_ENV = {
    "ANSIBLE_CALLBACK_PLUGINS": str(CALLBACK_PLUGINS),
    "ANSIBLE_CALLBACKS_ENABLED": "record_results",
    "ANSIBLE_PIPELINING": "True",
    "ANSIBLE_LOCALHOST_WARNING": "False",
    "ANSIBLE_INVENTORY_UNPARSED_WARNING": "False",
    "ANSIBLE_NOCOLOR": "1",
    "ANSIBLE_RETRY_FILES_ENABLED": "False",
}
# Tasks of modules that need no cluster must not find one by accident either.
OFFLINE_ENV = {"KUBECONFIG": None, "K8S_AUTH_KUBECONFIG": None}


def kubeconfig_path():
    """The kubeconfig the cluster tests use, or None when none is configured."""
    path = os.environ.get("KUBECONFIG") or (str(DEFAULT_KUBECONFIG) if DEFAULT_KUBECONFIG.exists() else None)
    return path.split(os.pathsep)[0] if path else None


class PlaybookError(AssertionError):
    """ansible-playbook itself failed (not a task under test, whose failures are results)."""


def run_tasks(tasks, workdir, env=None):
    """Runs tasks on localhost in one ansible-playbook process and returns each task's result.

    Every task runs with ignore_errors, so a failing module shows up as a result with `failed: true`
    and its `msg` instead of aborting the play. A task may set `check_mode: true` itself. Results are
    collected by the test-only `record_results` callback (callback_plugins/).
    """
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = workdir / "results.json"
    play_tasks = []
    for index, task in enumerate(tasks):
        task = dict(task)
        task.setdefault("name", "task %d" % index)
        task["ignore_errors"] = True
        play_tasks.append(task)
    playbook = workdir / "playbook.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": play_tasks}]))

    run_env = dict(os.environ, RECORD_RESULTS_FILE=str(out), **ANSIBLE_TEST_ENV)
    for key, value in (env or {}).items():
        if value is None:
            run_env.pop(key, None)
        else:
            run_env[key] = value
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), str(playbook)],
        cwd=str(workdir),
        env=run_env,
        capture_output=True,
        text=True,
        timeout=PLAYBOOK_TIMEOUT_SECONDS,
    )
    if proc.returncode != 0 or not out.exists():
        raise PlaybookError(
            "ansible-playbook exited with %d\n--- stdout\n%s\n--- stderr\n%s" % (proc.returncode, proc.stdout, proc.stderr)
        )
    results = json.loads(out.read_text())
    if len(results) != len(tasks):
        raise PlaybookError("expected %d task results, got %d:\n%s" % (len(tasks), len(results), proc.stdout))
    return results


@pytest.fixture
def run_offline(tmp_path):
    """run_tasks for modules that need no cluster."""
    return lambda tasks: run_tasks(tasks, tmp_path / ("run-%s" % uuid.uuid4().hex[:8]), env=OFFLINE_ENV)


# ---------------------------------------------------------------------------------------------------
# Cluster fixtures


@pytest.fixture(scope="session")
def kubeconfig():
    path = kubeconfig_path()
    if path is None:
        pytest.skip("no cluster: set KUBECONFIG or run hack/local-cluster.sh up")
    if not Path(path).exists():
        pytest.fail("KUBECONFIG names %s, which does not exist" % path)
    return path


@pytest.fixture(scope="session")
def api_client(kubeconfig):
    from kubernetes import config

    client = config.new_client_from_config(config_file=kubeconfig, persist_config=False)
    yield client
    client.close()


@pytest.fixture(scope="session")
def core_v1(api_client):
    from kubernetes import client

    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def custom_objects(api_client):
    from kubernetes import client

    return client.CustomObjectsApi(api_client)


def crd_manifest(kind, plural, status_subresource):
    version = {
        "name": VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }
        },
    }
    if status_subresource:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "%s.%s" % (plural, GROUP)},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": kind + "List"},
            "versions": [version],
        },
    }


def wait_established(extensions, name, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        crd = extensions.read_custom_resource_definition(name)
        conditions = (crd.status and crd.status.conditions) or []
        if any(c.type == "Established" and c.status == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise AssertionError("CRD %s not Established after %ds" % (name, timeout))
        time.sleep(0.2)


@pytest.fixture(scope="session")
def test_crds(api_client):
    """Installs the Widget (status subresource) and Gadget (none) CRDs; they stay installed for later runs."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    extensions = client.ApiextensionsV1Api(api_client)
    for spec, status in ((WITH_STATUS, True), (WITHOUT_STATUS, False)):
        manifest = crd_manifest(spec["kind"], spec["plural"], status)
        try:
            extensions.create_custom_resource_definition(manifest)
        except ApiException as exc:
            if exc.status != 409:
                raise
        wait_established(extensions, manifest["metadata"]["name"])
    return {"with_status": WITH_STATUS, "without_status": WITHOUT_STATUS}


@pytest.fixture(scope="module")
def namespace(core_v1, request):
    """A fresh namespace for one test module, deleted afterwards."""
    from kubernetes.client.rest import ApiException

    base = request.module.__name__.rsplit(".", 1)[-1].replace("_", "-")[:30]
    name = "coll-%s-%s" % (base, uuid.uuid4().hex[:6])
    core_v1.create_namespace({"metadata": {"name": name}})
    yield name
    try:
        core_v1.delete_namespace(name)
    except ApiException as exc:
        if exc.status != 404:
            raise


@pytest.fixture
def run_cluster(kubeconfig, tmp_path):
    """run_tasks with the cluster handed over only the way the operator does it: K8S_AUTH_KUBECONFIG."""
    env = {"K8S_AUTH_KUBECONFIG": kubeconfig, "KUBECONFIG": None}
    return lambda tasks: run_tasks(tasks, tmp_path / ("run-%s" % uuid.uuid4().hex[:8]), env=env)


@pytest.fixture
def make_widget(custom_objects, namespace, test_crds):
    """Creates a Widget (optionally with a status) and returns its name."""

    def make(status=None, spec=None):
        name = "widget-%s" % uuid.uuid4().hex[:8]
        body = {"apiVersion": API_VERSION, "kind": "Widget", "metadata": {"name": name}, "spec": spec or {"size": 1}}
        custom_objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "widgets", body)
        if status is not None:
            current = custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "widgets", name)
            current["status"] = status
            custom_objects.replace_namespaced_custom_object_status(GROUP, VERSION, namespace, "widgets", name, current)
        return name

    return make


@pytest.fixture
def get_widget(custom_objects, namespace):
    return lambda name: custom_objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "widgets", name)
