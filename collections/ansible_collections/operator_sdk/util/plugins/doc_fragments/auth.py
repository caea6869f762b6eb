# -*- coding: utf-8 -*-
# Documentation of the connection arguments shared by the Kubernetes modules of this collection.

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file, or the kubeconfig itself as a dictionary.
      - Without it (and without I(host)), the in-cluster service account is tried, then the file
        named by C(KUBECONFIG), then C(~/.kube/config).
      - Falls back to the C(K8S_AUTH_KUBECONFIG) environment variable, which the operator sets for
        every run so that requests go through its proxy.
    type: raw
  context:
    description:
      - Name of the kubeconfig context to use instead of the current one.
      - Falls back to C(K8S_AUTH_CONTEXT).
    type: str
  host:
    description:
      - URL of the API server; overrides the kubeconfig's.
      - Falls back to C(K8S_AUTH_HOST).
    type: str
  api_key:
    description:
      - Bearer token for the API server.
      - Falls back to C(K8S_AUTH_API_KEY).
    type: str
  username:
    description:
      - User name for HTTP basic authentication.
      - Falls back to C(K8S_AUTH_USERNAME).
    type: str
  password:
    description:
      - Password for HTTP basic authentication.
      - Falls back to C(K8S_AUTH_PASSWORD).
    type: str
  validate_certs:
    description:
      - Whether to verify the API server's certificate.
      - Falls back to C(K8S_AUTH_VALIDATE_CERTS).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description:
      - Path to a CA bundle used to verify the API server's certificate.
      - Falls back to C(K8S_AUTH_CA_CERT).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description:
      - Path to a client certificate for TLS authentication.
      - Falls back to C(K8S_AUTH_CLIENT_CERT).
    type: path
    aliases: [cert_file]
  client_key:
    description:
      - Path to the key of I(client_cert).
      - Falls back to C(K8S_AUTH_CLIENT_KEY).
    type: path
    aliases: [key_file]
  proxy:
    description:
      - HTTP proxy URL for requests to the API server.
      - Falls back to C(K8S_AUTH_PROXY).
    type: str
  persist_config:
    description:
      - Whether refreshed credentials (for example renewed OIDC tokens) are written back to the
        kubeconfig file.
      - Falls back to C(K8S_AUTH_PERSIST_CONFIG).
    type: bool
requirements:
  - python >= 3.9
  - kubernetes (the Python client) >= 12.0.0
notes:
  - The connection arguments behave like those of C(kubernetes.core.k8s).
"""
