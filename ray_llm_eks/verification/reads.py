"""Every read the gate and continuous verification make from outside their process: capped in
size, bounded in wall-clock time, and numbers refused unless finite.

What they read is written by the pods they verify, and the Ray and vLLM pods run privileged: a
broken or hostile worker can answer with an endless body, an SSE stream that never ends, a body
dripped one byte a second, or ``NaN`` where a count belongs. None of that may make a run pass, and
none may hold it past its deadline.

- **Size.** Each kind of read has one limit (:data:`LIMITS`); a body over it fails the read with
  :class:`TooLarge`, which names the read and the limit. Nothing is truncated silently: a cut log
  or metrics page could hide the very line or counter that fails the run.
- **Time.** A socket timeout is per ``recv``: a server sending one byte a second never trips it.
  So every request also gets a watchdog (:class:`_Watch`) that shuts its socket down when the
  request's ``timeout`` has passed since it began (connect, headers and body together), and the
  read then fails with :class:`DeadlinePassed`. The TLS handshake with the API server is bounded by
  its per-``recv`` timeout only (the socket is not reachable while it is being wrapped); every pod
  the gate reads is plain HTTP.
- **Numbers.** :func:`json_loads` refuses ``NaN``, ``Infinity`` and ``-Infinity`` (which Python's
  ``json`` accepts by default) and floats that overflow to infinity (``1e309``); :func:`count`
  accepts only a non-negative integer below 2**63.

Standard library only: it runs in the cluster.
"""

from __future__ import annotations

import base64
import http.client
import io
import json
import math
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Iterator

MiB = 1 << 20


@dataclass(frozen=True)
class Limit:
    read: str
    max_bytes: int


KUBE_API = Limit("a Kubernetes API answer", 32 * MiB)
"""A list of pods, nodes or ConfigMaps by label, or one object: far below this (an object is at
most 1.5 MiB in etcd)."""
POD_LOG = Limit("a pod log", 32 * MiB)
"""The kubelet rotates a container's log at 10 MiB by default (``containerLogMaxSize``) and serves
only the latest file (kubernetes.io, "Logging Architecture", log rotation); the gate also asks the
API server for no more (``PodLogOptions.limitBytes``, core/v1)."""
METRICS = Limit("a metrics page", 16 * MiB)
"""A Ray node's ``/metrics``: a few hundred kB with vLLM's series."""
EFA_COUNTERS = Limit("an EFA counter reading", 1 * MiB)
"""``GET /counters``: a few dozen counters per device, under 2 kB."""
AWS_ANSWER = Limit("an AWS answer", 64 * 1024)
"""Pod Identity credentials, or ``GetSecretValue`` (a ``SecretString`` is at most 65,536 bytes by
Secrets Manager's quotas; the signal's URL is about 600): :mod:`.aws_secret`."""
PROBE_STREAM = Limit("a probe's SSE stream", 1 * MiB)
"""A streamed chat completion of at most ``probe_max_tokens`` (16) tokens: a few kB."""
ERROR_BODY = Limit("an HTTP error answer", 64 * 1024)
"""Only its first 300 characters are reported."""
LIMITS = (KUBE_API, POD_LOG, METRICS, EFA_COUNTERS, AWS_ANSWER, PROBE_STREAM, ERROR_BODY)


class TooLarge(ValueError):
    pass


class DeadlinePassed(TimeoutError):
    pass


class _Watch:
    """Shuts the request's socket down ``seconds`` after it began, which ends any ``recv`` at once."""

    def __init__(self, seconds: float) -> None:
        self.sock: Any = None
        self.expired = False
        self.timer = threading.Timer(max(0.0, seconds), self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        self.expired = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):  # not connected yet: the connect's own timeout bounds it
            pass


def _via(request: urllib.request.Request, proxy: str) -> urllib.request.Request:
    """``request`` through the HTTP proxy ``proxy`` (``http://[user:password@]host:port``): an
    https URL through a CONNECT tunnel (``http.client``'s ``set_tunnel``, so TLS and its name check
    stay end to end with the server), an http URL by its absolute URI. Unlike ``urllib``'s
    ``ProxyHandler`` it ignores ``NO_PROXY``: a kubeconfig's ``proxy-url`` is used for its server
    whatever the environment says, as kubectl does."""
    parts = urllib.parse.urlsplit(proxy)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http:// proxy URL (got {proxy!r})")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    request.set_proxy(f"{host}:{parts.port or 80}", "http")
    if parts.username is not None:
        credentials = f"{urllib.parse.unquote(parts.username)}:{urllib.parse.unquote(parts.password or '')}"
        request.add_header("Proxy-Authorization", "Basic " + base64.b64encode(credentials.encode()).decode())
    return request


def _opener(watch: _Watch, context: Any, proxy: str | None = None) -> urllib.request.OpenerDirector:
    def watched(base: Any) -> Any:
        class Connection(base):  # type: ignore[misc,valid-type]
            def connect(self) -> None:
                super().connect()
                # Kept here: urllib drops the connection's reference once the headers are in, while
                # the answer still reads from the socket.
                watch.sock = self.sock
        return Connection

    class Handler(urllib.request.HTTPSHandler, urllib.request.HTTPHandler):
        def http_open(self, req: Any) -> Any:
            return self.do_open(watched(http.client.HTTPConnection), _via(req, proxy) if proxy else req)

        def https_open(self, req: Any) -> Any:
            return self.do_open(watched(http.client.HTTPSConnection), _via(req, proxy) if proxy else req,
                                context=context)

    # An explicit proxy replaces the environment's (an empty ProxyHandler keeps urllib from adding its own).
    return urllib.request.build_opener(Handler(), *([urllib.request.ProxyHandler({})] if proxy else []))


class Response:
    """An open answer (:func:`urlopen`): its ``status``, and its body read whole or by line, within
    the limit and the deadline it was opened with."""

    def __init__(self, raw: Any, watch: _Watch, limit: Limit, url: str, seconds: float) -> None:
        self.raw, self.watch, self.status, self.left = raw, watch, int(raw.status), limit.max_bytes
        self.what = (f"{limit.read} from {url}", seconds, limit.max_bytes)

    def _read(self, read: Any) -> bytes:
        try:
            data = read(self.left + 1)
        finally:  # a read the watchdog cut short, whatever it returned or raised
            if self.watch.expired:
                raise DeadlinePassed("{0} did not end within {1:g} s".format(*self.what))
        self.left -= len(data)
        if self.left < 0:
            raise TooLarge("{0} exceeds {2} bytes, its limit".format(*self.what))
        return bytes(data)

    def _ended(self, data: bytes) -> bytes:
        # ``read(n)`` returns what came when the server closes early; ``read()`` would have raised.
        if getattr(self.raw, "length", None):
            raise http.client.IncompleteRead(data, self.raw.length)
        return data

    def body(self) -> bytes:
        return self._ended(self._read(self.raw.read))

    def lines(self) -> Iterator[bytes]:
        while line := self._read(self.raw.readline):
            yield line
        self._ended(b"")

    def __enter__(self) -> Response:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.watch.timer.cancel()
        self.raw.close()


def urlopen(request: urllib.request.Request, limit: Limit, timeout: float, context: Any = None, *,
            proxy: str | None = None) -> Response:
    """Open ``request`` with ``timeout`` as the deadline of everything (connect, headers, body),
    through the HTTP proxy ``proxy`` if given (:func:`_via`; otherwise the environment's, as urllib does).

    An HTTP error status raises ``urllib.error.HTTPError`` as ``urllib`` does, with its body
    already read (at most :data:`ERROR_BODY`); a deadline that passes raises :class:`DeadlinePassed`."""
    watch = _Watch(timeout)
    try:
        raw = _opener(watch, context, proxy).open(request, timeout=timeout)
    except urllib.error.HTTPError as error:
        detail = error.read(ERROR_BODY.max_bytes)
        watch.timer.cancel()
        error.close()
        raise urllib.error.HTTPError(error.url, error.code, error.msg, error.hdrs, io.BytesIO(detail)) from None
    except (OSError, http.client.HTTPException):
        watch.timer.cancel()
        if watch.expired:
            raise DeadlinePassed(f"{limit.read} from {request.full_url} did not end within {timeout:g} s") from None
        raise
    return Response(raw, watch, limit, request.full_url, timeout)


def read(request: urllib.request.Request, limit: Limit, timeout: float, context: Any = None, *,
         proxy: str | None = None) -> bytes:
    with urlopen(request, limit, timeout, context, proxy=proxy) as response:
        return response.body()


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is not a finite number")
    return value


def json_loads(data: bytes | str) -> Any:
    """JSON with finite numbers only (ValueError otherwise, as for any JSON that does not parse, and
    for one nested deeper than Python's recursion limit)."""
    try:
        return json.loads(data, parse_constant=_finite, parse_float=_finite)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


def count(value: Any) -> int | None:
    """``value`` if it is a count (an integer, not a bool, in [0, 2**63)); None otherwise."""
    return value if type(value) is int and 0 <= value < 1 << 63 else None
