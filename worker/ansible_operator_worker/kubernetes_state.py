"""The kubernetes Python client's process-global state, and how a process of the worker gets the
state a newly started interpreter would have. Written against kubernetes 33 to 37.

The worker imports the client once, in the operator's environment; a new interpreter imports it
in its own (the run's, or a module's with its task's `environment:`), and starts with nothing
loaded. What the client keeps for the whole process, and what is done about it here:
- `kubernetes.config.kube_config.KUBE_CONFIG_DEFAULT_LOCATION`: the kubeconfig a client loads when
  none is named, read from `KUBECONFIG` at import. Imported in the worker, it would be the
  operator's own kubeconfig: set from the environment the process now has.
- `kubernetes.client.Configuration._default`: what `load_kube_config` or `load_incluster_config`
  last loaded, which every later client starts from; it keeps a hook that puts the loaded
  server and credentials back before each request, so that a later client given a host and a
  token of its own would talk to the first one's server with the first one's token. None.
- `kubernetes.config.kube_config._temp_files`: the certificate files written for a loaded
  kubeconfig, removed by an exit handler that the first one registers. Empty.

`fresh()` makes it so where a process becomes another program (the playbook process, a module);
`kept()` puts back what a module run in this process, or a lookup run for a task inline, changed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

_CONFIGURATION = "kubernetes.client.configuration"
_KUBE_CONFIG = "kubernetes.config.kube_config"


@dataclass(frozen=True)
class State:
    """The client's process-global state, as it was."""

    default_configuration: Any
    default_location: str
    temp_files: dict[str, str]


def save() -> State:
    configuration = sys.modules.get(_CONFIGURATION)
    kube_config = sys.modules.get(_KUBE_CONFIG)
    return State(
        default_configuration=configuration.Configuration._default if configuration else None,
        default_location=kube_config.KUBE_CONFIG_DEFAULT_LOCATION if kube_config else _default_location(),
        temp_files=dict(kube_config._temp_files) if kube_config else {},
    )


def restore(state: State) -> None:
    """Puts back `state`, in the client's modules as they are loaded now."""
    configuration = sys.modules.get(_CONFIGURATION)
    if configuration is not None:
        configuration.Configuration._default = state.default_configuration
    kube_config = sys.modules.get(_KUBE_CONFIG)
    if kube_config is not None:
        kube_config.KUBE_CONFIG_DEFAULT_LOCATION = state.default_location
        kube_config._temp_files = dict(state.temp_files)


def fresh() -> None:
    """The state a new interpreter has in this environment (what it would import the client in)."""
    restore(State(default_configuration=None, default_location=_default_location(), temp_files={}))


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """The state is put back as it was after the block."""
    state = save()
    try:
        yield
    finally:
        restore(state)


def _default_location() -> str:
    return os.environ.get("KUBECONFIG", "~/.kube/config")
