# -*- coding: utf-8 -*-
# Connection arguments of the Kubernetes modules and the API client built from them.

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import traceback

from ansible.module_utils.basic import env_fallback, missing_required_lib

KUBERNETES_IMPORT_ERROR = None
try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.dynamic import DynamicClient
    from kubernetes.dynamic.exceptions import DynamicApiError, ResourceNotFoundError, ResourceNotUniqueError
except ImportError:
    KUBERNETES_IMPORT_ERROR = traceback.format_exc()


def _env(name):
    """Argument-spec fallback to the K8S_AUTH_<NAME> environment variable, as kubernetes.core does."""
    return (env_fallback, ["K8S_AUTH_" + name.upper()])


AUTH_ARG_SPEC = dict(
    kubeconfig=dict(type="raw", fallback=_env("kubeconfig")),
    context=dict(type="str", fallback=_env("context")),
    host=dict(type="str", fallback=_env("host")),
    api_key=dict(type="str", no_log=True, fallback=_env("api_key")),
    username=dict(type="str", fallback=_env("username")),
    password=dict(type="str", no_log=True, fallback=_env("password")),
    validate_certs=dict(type="bool", aliases=["verify_ssl"], fallback=_env("validate_certs")),
    ca_cert=dict(type="path", aliases=["ssl_ca_cert"], fallback=_env("ca_cert")),
    client_cert=dict(type="path", aliases=["cert_file"], fallback=_env("client_cert")),
    client_key=dict(type="path", aliases=["key_file"], no_log=False, fallback=_env("client_key")),
    proxy=dict(type="str", fallback=_env("proxy")),
    persist_config=dict(type="bool", fallback=_env("persist_config")),
)
"""Connection arguments shared by every module that talks to the API server."""


class ClientError(Exception):
    """A failure to configure or reach the API server, with a message meant for the playbook author."""


def require_kubernetes(module):
    """Fail the task when the kubernetes Python client cannot be imported by the module's interpreter."""
    if KUBERNETES_IMPORT_ERROR is not None:
        module.fail_json(msg=missing_required_lib("kubernetes"), exception=KUBERNETES_IMPORT_ERROR)


def _load_configuration(params):
    """Builds a client Configuration from the kubeconfig / in-cluster account, then applies explicit overrides."""
    configuration = k8s_client.Configuration()
    kubeconfig = params.get("kubeconfig")
    context = params.get("context")
    persist = bool(params.get("persist_config"))
    explicit_credentials = params.get("host") and (
        params.get("api_key") or params.get("username") or params.get("client_cert")
    )

    if isinstance(kubeconfig, dict):
        k8s_config.load_kube_config_from_dict(
            kubeconfig, context=context, client_configuration=configuration, persist_config=persist
        )
    elif kubeconfig:
        path = os.path.expanduser(str(kubeconfig))
        if not os.path.exists(path):
            raise ClientError("kubeconfig file %s does not exist" % path)
        k8s_config.load_kube_config(
            config_file=path, context=context, client_configuration=configuration, persist_config=persist
        )
    elif not explicit_credentials:
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException:
            # The client's default location is $KUBECONFIG (a path list) or ~/.kube/config.
            paths = [p for p in os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep) if p]
            if any(os.path.exists(os.path.expanduser(p)) for p in paths):
                k8s_config.load_kube_config(context=context, client_configuration=configuration, persist_config=persist)
            elif not params.get("host"):
                raise ClientError(
                    "no cluster configured: set kubeconfig (or K8S_AUTH_KUBECONFIG) or host, "
                    "or run inside a pod with a service account"
                )

    if params.get("host"):
        configuration.host = params["host"]
    if params.get("api_key"):
        configuration.api_key = {"authorization": "Bearer " + params["api_key"]}
    if params.get("username"):
        configuration.username = params["username"]
    if params.get("password"):
        configuration.password = params["password"]
    if params.get("validate_certs") is not None:
        configuration.verify_ssl = params["validate_certs"]
    if params.get("ca_cert"):
        configuration.ssl_ca_cert = params["ca_cert"]
    if params.get("client_cert"):
        configuration.cert_file = params["client_cert"]
    if params.get("client_key"):
        configuration.key_file = params["client_key"]
    if params.get("proxy"):
        configuration.proxy = params["proxy"]
    return configuration


def dynamic_client(module):
    """A DynamicClient for the cluster described by the module's connection arguments; fails the task on error."""
    require_kubernetes(module)
    try:
        api_client = k8s_client.ApiClient(_load_configuration(module.params))
        return DynamicClient(api_client)
    except ClientError as exc:
        module.fail_json(msg=str(exc))
    except ConfigException as exc:
        module.fail_json(msg="invalid Kubernetes client configuration: %s" % exc)
    except DynamicApiError as exc:
        module.fail_json(msg="API discovery failed: %s" % api_error_message(exc), status=exc.status)
    except Exception as exc:  # urllib3 connection errors and friends have no common base class
        module.fail_json(msg="could not reach the API server: %s" % exc, exception=traceback.format_exc())


def find_resource(module, client, api_version, kind):
    """The discovered API resource for api_version/kind; fails the task when there is none or several."""
    try:
        return client.resources.get(api_version=api_version, kind=kind)
    except ResourceNotFoundError:
        module.fail_json(msg="the API server has no resource of kind %s in %s" % (kind, api_version))
    except ResourceNotUniqueError:
        module.fail_json(msg="kind %s in %s matches several resources; it is ambiguous" % (kind, api_version))
    except DynamicApiError as exc:
        module.fail_json(msg="API discovery for %s %s failed: %s" % (api_version, kind, api_error_message(exc)))


def api_error_message(exc):
    """The most useful text of an API error: the server's Status message when there is one."""
    body = getattr(exc, "body", None)
    if body:
        try:
            status = json.loads(body.decode("utf-8") if isinstance(body, bytes) else body)
            if isinstance(status, dict) and status.get("message"):
                return "%s (%s)" % (status["message"], exc.status)
        except ValueError:
            pass
    return "%s %s" % (getattr(exc, "status", ""), getattr(exc, "reason", exc))


def is_api_error(exc, status=None):
    """True when exc is an API error, with the given HTTP status if one is given."""
    if KUBERNETES_IMPORT_ERROR is not None or not isinstance(exc, DynamicApiError):
        return False
    return status is None or exc.status == status
