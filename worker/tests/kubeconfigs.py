"""Kubeconfig files for the worker's tests: a server and a token, never contacted."""

from __future__ import annotations

import base64
from pathlib import Path


def write(path: Path, server: str, token: str) -> Path:
    """A kubeconfig at `path` for `server` with `token`, its CA inline (so that loading it writes a
    temporary file)."""
    ca = base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot one\n-----END CERTIFICATE-----\n").decode()
    path.write_text(
        f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "{server}", certificate-authority-data: "{ca}"}}}}]
users: [{{name: u, user: {{token: "{token}"}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""
    )
    return path
