"""Read one Secrets Manager secret with the pod's EKS Pod Identity credentials, standard library only.

The deploy's signal (the wait condition handle's presigned URL) lives in a Secrets Manager secret
that only the gate's own role may read, so it never enters a manifest, an event or a log
(docs/threat-model.md, T12). The gate runs on the serving image's Python without boto3 (the
verification package is standard library only), so this module does what botocore would:

- Credentials: EKS Pod Identity's webhook sets ``AWS_CONTAINER_CREDENTIALS_FULL_URI`` (the node's
  Pod Identity agent, ``http://169.254.170.23/v1/credentials``) and
  ``AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE`` (the projected token); a ``GET`` of the URI with the
  file's content as ``Authorization`` returns ``AccessKeyId``, ``SecretAccessKey``, ``Token`` and
  ``Expiration`` (EKS user guide, "pod-id-how-it-works"; the SDKs' container credential provider).
- The call: ``POST /`` to ``secretsmanager.<region>.<domain>`` with the JSON 1.1 protocol
  (``X-Amz-Target: secretsmanager.GetSecretValue``, ``Content-Type: application/x-amz-json-1.1``,
  body ``{"SecretId": ...}``; Secrets Manager API reference, "GetSecretValue"), signed with
  Signature Version 4 (IAM user guide, "Create a signed AWS API request"): a canonical request,
  a string to sign over its SHA-256, and an HMAC-SHA256 key derived from the date, region and
  service. The tests compare the signature with botocore's ``SigV4Auth`` for the same request.

Every read goes through :mod:`.reads`, bounded in size (:data:`~.reads.AWS_ANSWER`) and in
wall-clock time (``timeout`` covers connect, headers and body), like every other read of the gate.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Mapping

from . import reads

SERVICE = "secretsmanager"
TARGET = "secretsmanager.GetSecretValue"
CONTENT_TYPE = "application/x-amz-json-1.1"
ALGORITHM = "AWS4-HMAC-SHA256"
MAX_ANSWER_BYTES = reads.AWS_ANSWER.max_bytes
FULL_URI_ENV = "AWS_CONTAINER_CREDENTIALS_FULL_URI"
TOKEN_FILE_ENV = "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE"
ENDPOINT_ENV = "AWS_ENDPOINT_URL_SECRETS_MANAGER"
"""The endpoint override botocore reads for this service (SDK reference, "service-specific endpoints")."""


class SecretReadError(RuntimeError):
    """The secret could not be read; the message says which step failed."""


@dataclass(frozen=True)
class Credentials:
    access_key: str
    secret_key: str
    token: str | None = None

    def __repr__(self) -> str:  # never print a key
        return f"Credentials(access_key={self.access_key[:4]}…)"


def _read_answer(request: urllib.request.Request, timeout: float) -> Any:
    """The JSON answer to ``request``, read within :data:`~.reads.AWS_ANSWER` and ``timeout``."""
    try:
        return reads.json_loads(reads.read(request, reads.AWS_ANSWER, timeout))
    except reads.TooLarge:
        raise SecretReadError(f"an answer of more than {MAX_ANSWER_BYTES} bytes") from None


def container_credentials(env: Mapping[str, str] = os.environ, *, timeout: float = 5.0) -> Credentials:
    """The pod's EKS Pod Identity credentials from its agent (see the module docstring)."""
    uri = env.get(FULL_URI_ENV)
    token_file = env.get(TOKEN_FILE_ENV)
    if not uri or not token_file:
        raise SecretReadError(f"no EKS Pod Identity credentials in this pod ({FULL_URI_ENV} and {TOKEN_FILE_ENV} "
                              "unset): was the Pod Identity association created before the pod?")
    try:
        with open(token_file) as handle:
            token = handle.read(MAX_ANSWER_BYTES).strip()
        answer = _read_answer(urllib.request.Request(uri, headers={"Authorization": token}), timeout)
        return Credentials(str(answer["AccessKeyId"]), str(answer["SecretAccessKey"]), answer.get("Token"))
    except SecretReadError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise SecretReadError(f"cannot get credentials from {uri}: {type(error).__name__}: {error}") from None


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hmac(key: bytes, text: str) -> bytes:
    return hmac.new(key, text.encode(), hashlib.sha256).digest()


def signed_headers(url: str, body: bytes, headers: Mapping[str, str], credentials: Credentials, region: str,
                   service: str, now: datetime.datetime) -> dict[str, str]:
    """``headers`` plus ``Host``, ``X-Amz-Date``, ``X-Amz-Security-Token`` and the SigV4 ``Authorization``
    of a ``POST`` of ``body`` to ``url`` (path ``/`` or another, no query string)."""
    parts = urllib.parse.urlsplit(url)
    stamp = now.astimezone(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    day = stamp[:8]
    every = {**headers, "Host": parts.netloc, "X-Amz-Date": stamp}
    if credentials.token:
        every["X-Amz-Security-Token"] = credentials.token
    canonical = {name.lower(): " ".join(str(value).split()) for name, value in every.items()}
    names = sorted(canonical)
    request = "\n".join(["POST", urllib.parse.quote(parts.path or "/", safe="/~"), parts.query,
                         "".join(f"{name}:{canonical[name]}\n" for name in names), ";".join(names), _sha256(body)])
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join([ALGORITHM, stamp, scope, _sha256(request.encode())])
    key = _hmac(_hmac(_hmac(_hmac(f"AWS4{credentials.secret_key}".encode(), day), region), service), "aws4_request")
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    every["Authorization"] = (f"{ALGORITHM} Credential={credentials.access_key}/{scope}, "
                              f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return every


def endpoint_of(secret_arn: str) -> tuple[str, str]:
    """The region and Secrets Manager endpoint of ``secret_arn`` (``arn:<partition>:secretsmanager:<region>:...``)."""
    fields = secret_arn.split(":")
    if len(fields) < 7 or fields[0] != "arn" or fields[2] != SERVICE or not fields[3]:
        raise SecretReadError(f"not a Secrets Manager secret ARN: {secret_arn!r}")
    partition, region = fields[1], fields[3]
    domain = "amazonaws.com.cn" if partition == "aws-cn" else "amazonaws.com"
    return region, f"https://{SERVICE}.{region}.{domain}/"


def get_secret_string(secret_arn: str, *, env: Mapping[str, str] = os.environ, timeout: float = 10.0,
                      now: datetime.datetime | None = None) -> str:
    """The ``SecretString`` of ``secret_arn``, read with the pod's Pod Identity credentials.

    :raises SecretReadError: no credentials, a refused call (with AWS's error type and message), or
        a secret without a string.
    """
    region, endpoint = endpoint_of(secret_arn)
    endpoint = env.get(ENDPOINT_ENV) or endpoint
    credentials = container_credentials(env, timeout=timeout)
    body = json.dumps({"SecretId": secret_arn}).encode()
    headers = signed_headers(endpoint, body, {"Content-Type": CONTENT_TYPE, "X-Amz-Target": TARGET}, credentials,
                             region, SERVICE, now or datetime.datetime.now(datetime.timezone.utc))
    request = urllib.request.Request(endpoint, data=body, headers=headers, method="POST")
    try:
        answer = _read_answer(request, timeout)
    except urllib.error.HTTPError as error:
        try:
            detail = json.loads(error.read(MAX_ANSWER_BYTES))
            reason = f"{detail.get('__type', '').split('#')[-1]}: {detail.get('message') or detail.get('Message')}"
        except ValueError:
            reason = error.reason
        raise SecretReadError(f"GetSecretValue {secret_arn} refused (HTTP {error.code}): {reason}") from None
    except (OSError, ValueError) as error:
        raise SecretReadError(f"GetSecretValue {secret_arn}: {type(error).__name__}: {error}") from None
    value = answer.get("SecretString") if isinstance(answer, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise SecretReadError(f"secret {secret_arn} has no SecretString")
    return value.strip()
