"""A :class:`~ray_llm_eks.verification.kube.KubeAccess` from a kubeconfig, for ``ray-llm-eks verify`` and ``drill``.

The kubeconfig is read by the official ``kubernetes`` client's loader
(``kubernetes.config.load_kube_config``), so it means what it means to kubectl: ``KUBECONFIG=a:b``
merges the files (the first file that names a context, cluster or user wins; the last
``current-context`` set wins), relative paths resolve against the file that holds them, and the
user may authenticate by ``token``, ``tokenFile``, client certificate and key (files or ``-data``),
an ``exec`` credential plugin (``aws eks get-token``; run again once its
``expirationTimestamp`` passes) or an ``auth-provider`` (``oidc``; ``gcp`` with ``google-auth``).
The cluster's ``server``, ``certificate-authority[-data]``, ``insecure-skip-tls-verify``,
``tls-server-name`` and ``proxy-url`` (an ``http://`` proxy) are honoured.

The client's own HTTP layer (urllib3) is not used: the gate's requests go through
:mod:`ray_llm_eks.verification.reads`, which bounds every answer's size and wall-clock time (a
socket timeout alone does not), and which the in-cluster gate must keep without the ``kubernetes``
package (standard library only). So what the loader resolved (server, CA file, client certificate,
token with its refresh, TLS server name, proxy) becomes a ``KubeAccess``, and both the gate in the
cluster and ``verify`` here talk through the same, tested transport.

Anything missing, unreadable or refused is a
:class:`~ray_llm_eks.verification.kube.NoClusterAccess` (exit code 3) that says which.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

from .verification.kube import KubeAccess, NoClusterAccess

DEFAULT_KUBECONFIG = "~/.kube/config"


def default_location() -> str:
    """``$KUBECONFIG`` (a list of files, separated as in ``PATH``), else ``~/.kube/config``; read at
    each call, not once at import as the client's own default is."""
    return os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG


class _Errors(logging.Handler):
    """The loader logs, rather than raises, a credential plugin that fails: collect what it logs."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def load_access(path: str | os.PathLike[str] | None = None, context: str | None = None) -> KubeAccess:
    """The access ``context`` (default: the current one) of the kubeconfig at ``path`` (default:
    :func:`default_location`; either may list several files) gives."""
    from kubernetes.client import Configuration
    from kubernetes.config.config_exception import ConfigException
    from kubernetes.config.kube_config import ENV_KUBECONFIG_PATH_SEPARATOR, load_kube_config

    source = os.fspath(path) if path else default_location()
    files = [Path(name).expanduser() for name in source.split(ENV_KUBECONFIG_PATH_SEPARATOR) if name]
    if not any(file.exists() for file in files):
        raise NoClusterAccess(f"no kubeconfig at {source} (no such file); give --kubeconfig or set KUBECONFIG, "
                              "e.g. with `aws eks update-kubeconfig`")
    # proxy="" : only the kubeconfig's proxy-url, never the client's reading of HTTPS_PROXY (urllib
    # reads the environment's itself, with NO_PROXY, when the kubeconfig names none).
    configuration = Configuration(host="", proxy="")  # host "": so a cluster without a server shows
    errors = _Errors()
    logging.getLogger().addHandler(errors)
    try:
        load_kube_config(config_file=source, context=context, client_configuration=configuration,
                         persist_config=False)
    except OSError as error:
        raise NoClusterAccess(f"cannot read kubeconfig {error.filename or source}: {error.strerror}") from None
    except ConfigException as error:
        raise NoClusterAccess(f"kubeconfig {source}: {error}") from None
    except Exception as error:  # noqa: BLE001 - a malformed file (YAML, or a list where a map belongs)
        raise NoClusterAccess(f"kubeconfig {source} cannot be used: {type(error).__name__}: {error}") from None
    finally:
        logging.getLogger().removeHandler(errors)
    if not configuration.host:
        raise NoClusterAccess(f"kubeconfig {source}: the context's cluster has no server")
    authorization = configuration.api_key.get("BearerToken")
    if authorization is None and not configuration.cert_file and errors.messages:
        raise NoClusterAccess(f"kubeconfig {source}: the user's credential plugin failed: "
                              + "; ".join(errors.messages)[:500])
    if authorization is not None and not authorization.startswith("Bearer "):
        raise NoClusterAccess(f"kubeconfig {source}: the user has a username and password (basic authentication), "
                              "which Kubernetes removed in 1.19; accepted: a token, tokenFile, exec plugin, "
                              "auth-provider or client certificate")

    if configuration.proxy and not configuration.proxy.startswith("http://"):
        raise NoClusterAccess(f"kubeconfig {source}: proxy-url {configuration.proxy.split('://')[0]}://... is not "
                              "supported; accepted: an http:// proxy (HTTPS goes through it by CONNECT)")

    refreshing = threading.Lock()

    def token() -> str | None:
        # The loader's hook runs the exec plugin (or auth-provider) again once its token has expired;
        # one at a time (a drill's load and its gate ask from two threads).
        with refreshing:
            value = configuration.get_api_key_with_prefix("BearerToken")
        # Stripped as kubectl strips a tokenFile's (the client keeps its trailing newline).
        return value.removeprefix("Bearer ").strip() or None if value else None

    return KubeAccess(server=configuration.host.rstrip("/"), token=token,
                      ca_file=configuration.ssl_ca_cert or None, client_cert_file=configuration.cert_file or None,
                      client_key_file=configuration.key_file or None,
                      insecure_skip_tls_verify=not configuration.verify_ssl,
                      tls_server_name=configuration.tls_server_name or None,
                      proxy_url=configuration.proxy or None)
