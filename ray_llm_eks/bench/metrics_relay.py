"""A loopback relay between AIPerf and the Ray nodes' ``/metrics``, which AIPerf's reachability check refuses.

Before a level, AIPerf 0.13 sends each ``--server-metrics`` endpoint a ``HEAD`` and falls back to
``GET`` only when the ``HEAD`` completes with another status
(``aiperf/common/mixins/base_metrics_collector_mixin.py``, ``_check_reachability_with_session``).
A Ray node serves its metrics with ``wsgiref`` and prometheus_client's WSGI app
(``ray/_private/prometheus_exporter.py``, Ray 2.58), which answers ``HEAD`` with ``405`` *and a
body* (``# HTTP 405 Method Not Allowed: HEAD; use OPTIONS or GET``, prometheus_client 0.26
``exposition.py``). When the body arrives with the headers, aiohttp raises ``Data after
`Connection: close```, AIPerf counts the endpoint unreachable, and the level is measured without
any server metric: on the local twin, 3 of 4 levels lost their KV-transfer time this way, and 2
of 3 bare checks failed against a live node. The same servers run on the cluster.

The relay answers ``HEAD`` as the upstream answers ``GET`` (status and headers, no body) and
passes ``GET`` through unchanged, so AIPerf reads exactly what the node exports. Standard library
only: the bench also runs as a Job in the cluster.
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

UPSTREAM_TIMEOUT_S = 30.0
"""As long as AIPerf waits for one scrape (``AIPERF_SERVER_METRICS_SCRAPE_TIMEOUT``, 30 s)."""


class MetricsRelay:
    """``with MetricsRelay(urls) as relayed:`` serves ``relayed[i]`` on 127.0.0.1 from ``urls[i]``."""

    def __init__(self, urls: tuple[str, ...] | list[str], timeout_s: float = UPSTREAM_TIMEOUT_S) -> None:
        self.upstream = tuple(urls)
        self.timeout_s = timeout_s
        self.urls: tuple[str, ...] = ()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def names(self) -> dict[str, str]:
        """Each relayed URL -> the upstream endpoint it stands for (empty before ``with``)."""
        return dict(zip(self.urls, self.upstream))

    def __enter__(self) -> tuple[str, ...]:
        if not self.upstream:
            return ()
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                self._relay(send_body=True)

            def do_HEAD(self) -> None:  # noqa: N802
                self._relay(send_body=False)

            def _relay(self, send_body: bool) -> None:
                upstream = relay._upstream_of(self.path)
                if upstream is None:
                    return self._answer(404, "text/plain", b"not a relayed endpoint\n", send_body)
                try:
                    with urllib.request.urlopen(upstream, timeout=relay.timeout_s) as response:
                        body, status = response.read(), response.status
                        content_type = response.headers.get("Content-Type", "text/plain")
                except urllib.error.HTTPError as error:
                    body, status = error.read(), error.code
                    content_type = error.headers.get("Content-Type", "text/plain")
                except (OSError, ValueError) as error:  # refused, timed out, unreachable
                    body, status, content_type = f"{upstream}: {error}\n".encode(), 502, "text/plain"
                self._answer(status, content_type, body, send_body)

            def _answer(self, status: int, content_type: str, body: bytes, send_body: bool) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if send_body:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
                pass  # AIPerf scrapes three times a second: one line each would bury the bench's log

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        port = self._server.server_address[1]
        self.urls = tuple(f"http://127.0.0.1:{port}/{index}/metrics" for index in range(len(self.upstream)))
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-relay", daemon=True)
        self._thread.start()
        return self.urls

    def _upstream_of(self, path: str) -> str | None:
        index, _, rest = path.lstrip("/").partition("/")
        if rest.split("?")[0] != "metrics" or not index.isdigit() or int(index) >= len(self.upstream):
            return None
        return self.upstream[int(index)]

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
