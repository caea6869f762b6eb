"""The kubernetes client as the worker imports it: its generated classes wait until used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from ansible_operator_worker.speedups import lazy_kubernetes


def child(code: str) -> dict:
    """Runs `code` in a new interpreter (imports are process-wide) and returns what it printed."""
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


NAMES = """
    import json, sys
    import kubernetes, kubernetes.client.apis
    names = {
        package: sorted(n for n in dir(sys.modules[package]) if not n.startswith("_") and n not in ("absolute_import",))
        for package in ("kubernetes.client", "kubernetes.client.models", "kubernetes.client.api")
    }
"""


def test_importing_the_client_imports_no_generated_class_until_one_is_used() -> None:
    seen = child(
        """
        import inspect, json, sys
        from ansible_operator_worker.speedups import lazy_kubernetes
        lazy_kubernetes.install()
        import kubernetes, kubernetes.dynamic
        before = sorted(m for m in sys.modules if m.startswith(("kubernetes.client.models.", "kubernetes.client.api.")))
        from kubernetes.client import V1ConfigMap
        from kubernetes.client.models import V1ObjectMeta
        api = kubernetes.client.ApiClient()
        body = api.sanitize_for_serialization(V1ConfigMap(metadata=V1ObjectMeta(name="a"), data={"k": "v"}))
        class Answer:
            data = json.dumps({"metadata": {"name": "b"}, "data": {"x": "y"}})
        if "content_type" in inspect.signature(api.deserialize).parameters:
            # kubernetes 35 and later: lazy on their own (the worker leaves them alone), another API
            typed = V1ConfigMap(metadata=V1ObjectMeta(name="b"))
        else:
            typed = api.deserialize(Answer(), "V1ConfigMap")
        after = sorted(m for m in sys.modules if m.startswith("kubernetes.client.models."))
        print(json.dumps({
            "before": before, "after": after, "body": body, "typed": [type(typed).__name__, typed.metadata.name],
            "same": kubernetes.client.V1ConfigMap is kubernetes.client.models.v1_config_map.V1ConfigMap,
            "core": kubernetes.client.CoreV1Api.__module__,
        }))
        """
    )
    assert seen["before"] == [], "no model or API module is imported with the package"
    assert seen["body"] == {"metadata": {"name": "a"}, "data": {"k": "v"}}
    assert seen["typed"] == ["V1ConfigMap", "b"], "typed answers are deserialized by name"
    assert seen["same"], "one class, whichever way it is reached"
    assert seen["core"] == "kubernetes.client.api.core_v1_api"
    assert "kubernetes.client.models.v1_config_map" in seen["after"] and len(seen["after"]) < 10


def test_the_packages_offer_the_same_names_lazily_as_when_imported_whole() -> None:
    lazy = child(
        "from ansible_operator_worker.speedups import lazy_kubernetes\nlazy_kubernetes.install()\n"
        + textwrap.dedent(NAMES)
        + "print(json.dumps(names))"
    )
    whole = child(textwrap.dedent(NAMES) + "print(json.dumps(names))")
    assert len(whole["kubernetes.client.models"]) > 500
    assert lazy == whole


def test_an_unknown_name_is_an_attribute_error_and_a_star_import_gets_every_class() -> None:
    seen = child(
        """
        import json
        from ansible_operator_worker.speedups import lazy_kubernetes
        lazy_kubernetes.install()
        import kubernetes.client
        try:
            kubernetes.client.V1NoSuchThing
            missing = "found"
        except AttributeError as error:
            missing = str(error)
        namespace = {}
        exec("from kubernetes.client.models import *", namespace)
        print(json.dumps({"missing": missing, "star": "V1Pod" in namespace and "V1Service" in namespace}))
        """
    )
    assert seen["missing"] == "module 'kubernetes.client' has no attribute 'V1NoSuchThing'"
    assert seen["star"]


def test_only_single_class_imports_are_left_out_line_numbers_stay() -> None:
    source = "import os\nfrom kubernetes.client.models.v1_pod import V1Pod\nfrom kubernetes.client.rest import ApiException\nx = 1\n"
    kept, lazy = lazy_kubernetes.split(source)
    assert lazy == {"V1Pod": "kubernetes.client.models.v1_pod"}
    assert kept.splitlines() == ["import os", "", "from kubernetes.client.rest import ApiException", "x = 1"]
