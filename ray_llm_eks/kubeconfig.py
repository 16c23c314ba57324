"""A :class:`~ray_llm_eks.verification.kube.KubeAccess` from a kubeconfig, for ``ray-llm-eks verify``.

Reads the parts of the kubeconfig format that EKS and common setups use: the context's cluster
(``server``, ``certificate-authority[-data]``, ``insecure-skip-tls-verify``) and user (``token``,
``tokenFile``, client certificate and key, and ``exec`` credential plugins such as
``aws eks get-token``, whose ``ExecCredential`` output gives ``status.token``, re-run when its
``expirationTimestamp`` passes). Anything missing or unreadable is a
:class:`~ray_llm_eks.verification.kube.NoClusterAccess` (exit code 3).
"""

from __future__ import annotations

import atexit
import base64
import datetime as dt
import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from .verification.kube import KubeAccess, NoClusterAccess

EXEC_TIMEOUT_SECONDS = 60


def default_path() -> Path:
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def _named(items: list[dict[str, Any]] | None, name: str, kind: str, path: Path) -> dict[str, Any]:
    for item in items or ():
        if item.get("name") == name:
            return dict(item.get(kind) or {})
    raise NoClusterAccess(f"{path}: no {kind} named {name!r}")


def _data_file(data: str, suffix: str) -> str:
    """Inline certificate or key data as a private file for ssl (which reads paths), removed at exit."""
    handle = tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False)  # noqa: SIM115 - kept for ssl
    with handle:
        os.chmod(handle.name, 0o600)
        handle.write(base64.b64decode(data))
    atexit.register(lambda name=handle.name: os.path.exists(name) and os.remove(name))
    return handle.name


def _path(value: str | None, source: Path) -> str | None:
    """kubectl resolves relative file paths in a kubeconfig against the kubeconfig's own folder."""
    if not value:
        return None
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else source.parent / path)


class _ExecToken:
    def __init__(self, spec: dict[str, Any], source: Path) -> None:
        self.spec = spec
        self.source = source
        self.token: str | None = None
        self.expires: dt.datetime | None = None

    def __call__(self) -> str | None:
        now = dt.datetime.now(dt.timezone.utc)
        if self.token is None or (self.expires is not None and now >= self.expires - dt.timedelta(seconds=30)):
            self._refresh()
        return self.token

    def _refresh(self) -> None:
        env = dict(os.environ)
        env.update({item["name"]: item["value"] for item in self.spec.get("env") or ()})
        command = [self.spec["command"], *(self.spec.get("args") or ())]
        try:
            done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=EXEC_TIMEOUT_SECONDS,
                                  check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise NoClusterAccess(f"{self.source}: credential plugin {command[0]!r} could not run: {error}") from None
        if done.returncode != 0:
            raise NoClusterAccess(f"{self.source}: credential plugin {command[0]!r} failed: {done.stderr.strip()[:300]}")
        try:
            status = json.loads(done.stdout)["status"]
        except (ValueError, KeyError, TypeError):
            raise NoClusterAccess(f"{self.source}: credential plugin {command[0]!r} printed no ExecCredential") from None
        self.token = status.get("token")
        stamp = status.get("expirationTimestamp")
        self.expires = dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")) if stamp else None
        if not self.token:
            raise NoClusterAccess(f"{self.source}: credential plugin {command[0]!r} returned no token")


def load_access(path: str | os.PathLike[str] | None = None, context: str | None = None) -> KubeAccess:
    source = Path(path) if path else default_path()
    try:
        config = yaml.safe_load(source.read_text()) or {}
    except OSError as error:
        raise NoClusterAccess(f"cannot read kubeconfig {source}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise NoClusterAccess(f"kubeconfig {source} is not YAML: {error}") from None
    name = context or config.get("current-context")
    if not name:
        raise NoClusterAccess(f"{source}: no current-context; give --context")
    ctx = _named(config.get("contexts"), name, "context", source)
    cluster = _named(config.get("clusters"), ctx.get("cluster", ""), "cluster", source)
    user = _named(config.get("users"), ctx.get("user", ""), "user", source) if ctx.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise NoClusterAccess(f"{source}: cluster {ctx.get('cluster')!r} has no server")
    ca_file = _path(cluster.get("certificate-authority"), source)
    if cluster.get("certificate-authority-data"):
        ca_file = _data_file(cluster["certificate-authority-data"], ".crt")
    cert, key = _path(user.get("client-certificate"), source), _path(user.get("client-key"), source)
    if user.get("client-certificate-data"):
        cert = _data_file(user["client-certificate-data"], ".crt")
    if user.get("client-key-data"):
        key = _data_file(user["client-key-data"], ".key")
    if user.get("exec"):
        token: Any = _ExecToken(user["exec"], source)
    elif user.get("token"):
        token = lambda value=user["token"]: value  # noqa: E731
    elif user.get("tokenFile"):
        token = lambda file=Path(_path(user["tokenFile"], source) or ""): file.read_text().strip()  # noqa: E731
    else:
        token = lambda: None  # noqa: E731
    return KubeAccess(server=server.rstrip("/"), token=token, ca_file=ca_file, client_cert_file=cert,
                      client_key_file=key, insecure_skip_tls_verify=bool(cluster.get("insecure-skip-tls-verify")))
