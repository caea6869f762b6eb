#!/usr/bin/python3
"""Ansible module of the KubernetesCluster sample: the kubeconfig of a member cluster, from the
Secret the CR names (`spec.members[].kubeconfigSecret`), checked before anything loads it.

The Secret is chosen by whoever writes the CR, so it is used only when it opts in: its annotation
`ansible-operator.dev/allow-kinds` lists the kind (comma-separated, `*` for any). The kubeconfig is
refused when it asks the client to run a command or read a file on the operator's host (`exec`,
`auth-provider`, `tokenFile`, `client-certificate`, `client-key`, `certificate-authority`, any
`*-file`): the Python client would run an `exec` plugin as it loads the file. What is returned is a
new kubeconfig with only the server, the CA data and a token or client certificate data.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import yaml
from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: member_kubeconfig
short_description: The checked kubeconfig of a member cluster from its Secret
options:
  secret: {description: The Secret as k8s_info returns it (empty when not found)., type: dict, required: true}
  name: {description: The Secret's name, for messages., type: str, required: true}
  kind: {description: The kind of the CR using it., type: str, required: true}
"""

ALLOW_KINDS = "ansible-operator.dev/allow-kinds"
# Keys by which a kubeconfig makes its client run a command or read a file.
REFUSED_USER = ("exec", "auth-provider", "tokenFile", "client-certificate", "client-key")
REFUSED_CLUSTER = ("certificate-authority",)


def allowed(annotations: dict[str, str] | None, kind: str) -> bool:
    kinds = (annotations or {}).get(ALLOW_KINDS, "")
    return any(entry.strip() in (kind, "*") for entry in kinds.split(","))


def refused_keys(entries: Any, what: str, refused: tuple[str, ...]) -> list[str]:
    """`<what> <name>: <key>` for each refused key of the named entries (users or clusters)."""
    found = []
    for entry in entries if isinstance(entries, list) else []:
        body = entry.get(what) if isinstance(entry, dict) else None
        for key in sorted(body) if isinstance(body, dict) else []:
            if key in refused or key.endswith("-file") or key.endswith("File"):
                found.append(f"{what} {entry.get('name', '?')}: {key}")
    return found


def named(entries: Any, name: Any, what: str) -> dict[str, Any]:
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get(what), dict):
            return entry[what]
    raise ValueError(f"no {what} {name!r}")


def check(secret: dict[str, Any], name: str, kind: str) -> tuple[str, str]:
    """(problem, kubeconfig): the problem is empty when the kubeconfig can be used."""
    if not secret:
        return f"Secret {name} not found", ""
    if not allowed(secret.get("metadata", {}).get("annotations"), kind):
        return (
            f"Secret {name} is not allowed for kind {kind}: annotate it {ALLOW_KINDS}: "
            f'"{kind}" (a comma-separated list of kinds) to let CRs of that kind use it',
            "",
        )
    data = (secret.get("data") or {}).get("kubeconfig")
    if not data:
        return f"Secret {name} has no key kubeconfig", ""
    try:
        config = yaml.safe_load(base64.b64decode(data))
    except (binascii.Error, yaml.YAMLError, ValueError) as err:
        return f"Secret {name}: kubeconfig is not YAML ({type(err).__name__})", ""
    if not isinstance(config, dict):
        return f"Secret {name}: kubeconfig is not a mapping", ""
    refused = refused_keys(config.get("users"), "user", REFUSED_USER) + refused_keys(
        config.get("clusters"), "cluster", REFUSED_CLUSTER
    )
    if refused:
        return (
            f"Secret {name}: kubeconfig refused ({', '.join(refused)}): only server, "
            "certificate-authority-data and a token or client certificate data are used, "
            "never a command or a file",
            "",
        )
    try:
        context = named(config.get("contexts"), config.get("current-context"), "context")
        cluster = named(config.get("clusters"), context.get("cluster"), "cluster")
        user = named(config.get("users"), context.get("user"), "user")
    except ValueError as err:
        return f"Secret {name}: kubeconfig has {err} (from its current-context)", ""
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        return f"Secret {name}: kubeconfig has no http(s) server", ""
    clean_cluster = {"server": server}
    for key in ("certificate-authority-data", "tls-server-name", "insecure-skip-tls-verify"):
        if key in cluster:
            clean_cluster[key] = cluster[key]
    if user.get("token"):
        clean_user = {"token": user["token"]}
    elif user.get("client-certificate-data") and user.get("client-key-data"):
        clean_user = {key: user[key] for key in ("client-certificate-data", "client-key-data")}
    else:
        return f"Secret {name}: kubeconfig has neither a token nor client certificate data", ""
    clean = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "member", "cluster": clean_cluster}],
        "users": [{"name": "member", "user": clean_user}],
        "contexts": [{"name": "member", "context": {"cluster": "member", "user": "member"}}],
        "current-context": "member",
    }
    return "", yaml.safe_dump(clean, default_flow_style=False)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            # Not `no_log` here: Ansible would mask every output that repeats one of its values
            # (`v1`, the namespace) and garble the kubeconfig. The task is `no_log: true` instead.
            "secret": {"type": "dict", "required": True},
            "name": {"type": "str", "required": True},
            "kind": {"type": "str", "required": True},
        },
        supports_check_mode=True,
    )
    problem, kubeconfig = check(module.params["secret"], module.params["name"], module.params["kind"])
    module.exit_json(changed=False, problem=problem, kubeconfig=kubeconfig)


if __name__ == "__main__":
    main()
