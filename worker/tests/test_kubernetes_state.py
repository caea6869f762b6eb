"""The kubernetes client's process-wide state: what a loaded kubeconfig leaves for later clients,
made fresh as in a new interpreter, and put back."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from kubernetes import client, config
from kubernetes.config import kube_config

import kubeconfigs
from ansible_operator_worker import kubernetes_state


def _as_a_client_given_its_own_credentials_sees_it() -> tuple[str, str]:
    """The server and the token of a client that names both, as kubernetes.core builds one (from
    the default configuration, its own values set over it), once the request is about to go."""
    configuration = client.Configuration.get_default_copy()
    configuration.host = "https://own.example:6443"
    configuration.api_key = {"authorization": "Bearer own-token"}
    header = configuration.auth_settings()["BearerToken"]["value"]  # as a request's, after the refresh hook
    return configuration.host, header


def test_a_loaded_kubeconfig_is_forgotten_as_in_a_new_interpreter_and_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with kubernetes_state.kept():
        config.load_kube_config(config_file=str(kubeconfigs.write(tmp_path / "run", "https://run.example:6443", "run-token")))
        # What a later client given its own server and token would use: the loaded one's.
        assert _as_a_client_given_its_own_credentials_sees_it() == ("https://run.example:6443", "Bearer run-token")
        assert kube_config._temp_files
        loaded = kubernetes_state.save()

        monkeypatch.setenv("KUBECONFIG", str(tmp_path / "module"))
        kubernetes_state.fresh()
        assert _as_a_client_given_its_own_credentials_sees_it() == ("https://own.example:6443", "Bearer own-token")
        assert kube_config.KUBE_CONFIG_DEFAULT_LOCATION == str(tmp_path / "module")
        assert kube_config._temp_files == {}
        monkeypatch.delenv("KUBECONFIG")
        kubernetes_state.fresh()
        assert kube_config.KUBE_CONFIG_DEFAULT_LOCATION == "~/.kube/config"

        kubernetes_state.restore(loaded)
        assert _as_a_client_given_its_own_credentials_sees_it() == ("https://run.example:6443", "Bearer run-token")
        assert kube_config.KUBE_CONFIG_DEFAULT_LOCATION == loaded.default_location
        for path in kube_config._temp_files.values():
            os.remove(path)


def test_the_state_of_a_client_not_imported_is_left_to_its_import(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("kubernetes.client.configuration", "kubernetes.config.kube_config"):
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setenv("KUBECONFIG", "/elsewhere")
    kubernetes_state.fresh()
    assert kubernetes_state.save().default_location == "/elsewhere"
