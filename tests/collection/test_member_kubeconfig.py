"""The KubernetesCluster sample's member kubeconfig check (playbooks/library/member_kubeconfig.py): a
Secret named by the CR is used only when it opts in for the kind, and a kubeconfig that would make
the client run a command or read a file on the operator's host is refused before anything loads it."""

import base64
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_kubernetescluster_helpers import PLAYBOOKS, load

ALLOW = "ansible-operator.dev/allow-kinds"
member_kubeconfig = load(PLAYBOOKS / "library" / "member_kubeconfig.py")


def kubeconfig(user: dict, cluster: dict | None = None) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }


def secret(config: dict, allow: str | None = "KubernetesCluster") -> dict:
    annotations = {ALLOW: allow} if allow is not None else {}
    data = base64.b64encode(yaml.safe_dump(config).encode()).decode()
    return {"metadata": {"name": "m", "annotations": annotations}, "data": {"kubeconfig": data}}


def exec_user(marker: Path) -> dict:
    return {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "touch", "args": [str(marker)]}}


def load_with_the_python_client(text: str, tmp_path: Path) -> None:
    """Loads a kubeconfig as kubernetes.core does (a separate process: the client keeps state)."""
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    script = "import sys\nfrom kubernetes import config\ntry:\n    config.load_kube_config(sys.argv[1])\nexcept Exception:\n    pass\n"
    subprocess.run([sys.executable, "-c", script, str(path)], check=True, timeout=60)


def test_a_kubeconfig_with_an_exec_plugin_is_refused_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    attack = kubeconfig(exec_user(marker))
    # The attack is real: the Python client runs the plugin when it loads the kubeconfig.
    load_with_the_python_client(yaml.safe_dump(attack), tmp_path)
    assert marker.exists(), "the client did not run the exec plugin: this test would prove nothing"
    marker.unlink()

    problem, config = member_kubeconfig.check(secret(attack), "m", "KubernetesCluster")
    assert problem == (
        "Secret m: kubeconfig refused (user u: exec): only server, certificate-authority-data and a token "
        "or client certificate data are used, never a command or a file"
    )
    assert config == ""
    assert not marker.exists()


@pytest.mark.parametrize(
    "user, cluster, named",
    [
        ({"auth-provider": {"name": "oidc"}}, None, "user u: auth-provider"),
        ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, None, "user u: tokenFile"),
        ({"client-certificate": "/etc/k.crt", "client-key": "/etc/k.key"}, None, "user u: client-certificate, user u: client-key"),
        ({"token": "t"}, {"server": "https://h", "certificate-authority": "/etc/ca.crt"}, "cluster c: certificate-authority"),
    ],
)
def test_file_references_and_auth_providers_are_refused(user: dict, cluster: dict | None, named: str) -> None:
    problem, config = member_kubeconfig.check(secret(kubeconfig(user, cluster)), "m", "KubernetesCluster")
    assert problem.startswith(f"Secret m: kubeconfig refused ({named}): "), problem
    assert config == ""


def test_a_secret_without_the_opt_in_is_not_used() -> None:
    for allow in (None, "", "EtcdCluster", "kubernetescluster"):
        problem, config = member_kubeconfig.check(secret(kubeconfig({"token": "t"}), allow), "m", "KubernetesCluster")
        assert problem == (
            "Secret m is not allowed for kind KubernetesCluster: annotate it ansible-operator.dev/allow-kinds: "
            '"KubernetesCluster" (a comma-separated list of kinds) to let CRs of that kind use it'
        ), allow
        assert config == ""
    assert member_kubeconfig.check({}, "m", "KubernetesCluster") == ("Secret m not found", "")


def test_the_kubeconfig_used_has_only_the_server_ca_data_and_credentials(tmp_path: Path) -> None:
    cluster = {"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E=", "proxy-url": "http://p"}
    user = {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ", "as": "system:admin"}
    problem, text = member_kubeconfig.check(secret(kubeconfig(user, cluster), "EtcdCluster, KubernetesCluster"), "m", "KubernetesCluster")
    assert problem == ""
    assert yaml.safe_load(text) == {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "member", "cluster": {"server": "https://10.0.0.1:6443", "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "member", "user": {"client-certificate-data": "Q0VSVA==", "client-key-data": "S0VZ"}}],
        "contexts": [{"name": "member", "context": {"cluster": "member", "user": "member"}}],
        "current-context": "member",
    }
    problem, text = member_kubeconfig.check(secret(kubeconfig({"token": "t"}), "*"), "m", "KubernetesCluster")
    assert problem == "" and yaml.safe_load(text)["users"][0]["user"] == {"token": "t"}
    problem, _ = member_kubeconfig.check(secret(kubeconfig({"username": "a", "password": "b"})), "m", "KubernetesCluster")
    assert problem == "Secret m: kubeconfig has neither a token nor client certificate data"


def test_the_module_returns_the_kubeconfig_unmasked_through_ansible(tmp_path: Path) -> None:
    """Run as the sample runs it: Ansible masks a module's output that repeats a `no_log` argument
    (`v1` of the Secret's apiVersion would become `********` in `apiVersion: v1`)."""
    from conftest import OFFLINE_ENV, run_tasks

    found = dict(secret(kubeconfig({"token": "t"})), apiVersion="v1", kind="Secret", type="Opaque")
    task = {"member_kubeconfig": {"secret": found, "name": "m", "kind": "KubernetesCluster"}}
    env = dict(OFFLINE_ENV, ANSIBLE_LIBRARY=str(PLAYBOOKS / "library"))
    [result] = run_tasks([task], tmp_path / "run", env=env)
    assert result["problem"] == "", result
    config = yaml.safe_load(result["kubeconfig"])
    assert config["apiVersion"] == "v1" and config["users"][0]["user"] == {"token": "t"}, result["kubeconfig"]
