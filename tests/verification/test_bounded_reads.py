"""Crafted inputs against real loopback servers: no read outlives its deadline, no body passes its
limit, and no number that is not a count makes the gate pass (issue 24, "Finite, bounded inputs").

Each server is a real socket on 127.0.0.1. Times are asserted only as an upper bound with a
generous slack (a shared 2-core machine): the point is that a read that would otherwise last for
minutes (a byte every 0.1 s of a 100 kB body, an endless stream) ends near its deadline.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading
import time
import urllib.request
from typing import Any, Callable

import pytest
from fake_cluster import FakeDeployment
from prometheus_client import generate_latest

from ray_llm_eks.base.wire import GateSettings
from ray_llm_eks.verification import efa, metrics, probe, reads
from ray_llm_eks.verification.gate import Gate
from ray_llm_eks.verification.kube import Endpoints, Kube, KubeAccess, NoClusterAccess

SLACK_SECONDS = 10.0
"""Added to every deadline an assertion checks: generous, so only a read that ignores its deadline fails."""


class Loopback:
    """A TCP server on 127.0.0.1 that hands each connection to ``serve`` in a thread of its own."""

    def __init__(self, serve: Callable[[socket.socket], None]) -> None:
        self.stop = threading.Event()
        self.requests: list[bytes] = []
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}"
        threading.Thread(target=self._accept, args=(serve,), daemon=True).start()

    def _accept(self, serve: Callable[[socket.socket], None]) -> None:
        while not self.stop.is_set():
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(serve, connection), daemon=True).start()

    def _handle(self, serve: Callable[[socket.socket], None], connection: socket.socket) -> None:
        with connection:
            self.requests.append(_read_request(connection))
            try:
                serve(connection)
            except OSError:
                pass  # the client went away: what a deadline does

    def drip(self, connection: socket.socket, data: bytes, every: float) -> None:
        for byte in data:
            if self.stop.wait(every):
                return
            connection.sendall(bytes([byte]))

    def close(self) -> None:
        self.stop.set()
        self.server.close()


def _read_request(connection: socket.socket) -> bytes:
    """The whole request, headers and body (``Content-Length``): urllib may send them in two
    segments, and a body left unread when the server closes makes the kernel reset the connection
    before the client has read the answer."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = connection.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                   if line.lower().startswith(b"content-length:")), 0)
    while len(body) < length:
        chunk = connection.recv(65536)
        if not chunk:
            break
        body += chunk
    return head + b"\r\n\r\n" + body


@pytest.fixture
def loopback():
    servers: list[Loopback] = []

    def start(serve: Callable[[Loopback, socket.socket], None]) -> Loopback:
        server = Loopback(lambda connection: serve(server, connection))
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


def _timed(call: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    try:
        return call(), time.monotonic() - started
    except Exception as error:  # noqa: BLE001 - returned for the test to assert on
        return error, time.monotonic() - started


def test_a_body_dripped_a_byte_at_a_time_ends_at_the_deadline(loopback):
    """Each byte comes well inside the socket's per-recv timeout, so only a total deadline ends it."""
    server = loopback(lambda s, c: (c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"),
                                    s.drip(c, b"x" * 100_000, 0.1)))
    error, elapsed = _timed(lambda: reads.read(urllib.request.Request(server.url + "/metrics"), reads.METRICS, 1.0))
    assert isinstance(error, reads.DeadlinePassed), error
    assert str(error) == f"a metrics page from {server.url}/metrics did not end within 1 s"
    assert elapsed < 1.0 + SLACK_SECONDS


def test_headers_dripped_a_byte_at_a_time_end_at_the_deadline(loopback):
    server = loopback(lambda s, c: s.drip(c, b"HTTP/1.1 200 OK\r\n" + b"X-Slow: y\r\n" * 10_000, 0.1))
    error, elapsed = _timed(lambda: reads.read(urllib.request.Request(server.url), reads.KUBE_API, 1.0))
    assert isinstance(error, reads.DeadlinePassed), error
    assert str(error) == f"a Kubernetes API answer from {server.url} did not end within 1 s"
    assert elapsed < 1.0 + SLACK_SECONDS


@pytest.mark.parametrize("framing", ["content-length", "until-close", "chunked"])
def test_a_body_over_its_limit_fails_the_read_naming_the_read_and_the_limit(loopback, framing):
    size = reads.METRICS.max_bytes + 1
    head = {"content-length": f"Content-Length: {size}\r\n", "until-close": "Connection: close\r\n",
            "chunked": "Transfer-Encoding: chunked\r\n"}[framing]

    def serve(server: Loopback, connection: socket.socket) -> None:
        connection.sendall(f"HTTP/1.1 200 OK\r\n{head}\r\n".encode())
        block = b"y" * (1 << 20)
        for _ in range(size // len(block) + 1):
            connection.sendall(b"%x\r\n%s\r\n" % (len(block), block) if framing == "chunked" else block)

    server = loopback(serve)
    error, elapsed = _timed(lambda: reads.read(urllib.request.Request(server.url + "/metrics"), reads.METRICS, 30.0))
    assert isinstance(error, reads.TooLarge), error
    assert str(error) == f"a metrics page from {server.url}/metrics exceeds 16777216 bytes, its limit"


def test_an_error_answer_is_read_only_up_to_its_limit(loopback):
    server = loopback(lambda s, c: (c.sendall(b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\n"),
                                    c.sendall(b"e" * (4 * reads.ERROR_BODY.max_bytes))))
    error, _ = _timed(lambda: reads.read(urllib.request.Request(server.url), reads.KUBE_API, 10.0))
    assert isinstance(error, urllib.error.HTTPError) and error.code == 500
    assert len(error.read()) == reads.ERROR_BODY.max_bytes


def test_a_pod_log_over_its_limit_is_refused_and_the_api_server_is_asked_for_no_more(loopback):
    size = reads.POD_LOG.max_bytes + 1

    def serve(server: Loopback, connection: socket.socket) -> None:
        connection.sendall(f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
        block = b"I1130 line\n" * (1 << 16)
        for _ in range(size // len(block) + 1):
            connection.sendall(block)

    server = loopback(serve)
    kube = Kube(KubeAccess(server=server.url, token=lambda: "t"))
    with pytest.raises(NoClusterAccess) as refused:
        kube.pod_log("ns", "worker", "ray-worker", since="2026-11-30T21:03:46Z")
    assert not refused.value.transient  # the same log again would be as long
    assert str(refused.value) == (f"a pod log from {server.url}/api/v1/namespaces/ns/pods/worker/log?container=ray-worker&"
                                  "limitBytes=33554433&sinceTime=2026-11-30T21%3A03%3A46Z exceeds 33554432 bytes, its limit")
    assert b"limitBytes=33554433" in server.requests[0]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_body_cut_short_fails_the_read_as_urllib_would(loopback, framing):
    """``read(n)`` returns what came when the server closes before its declared length (``read()``
    raised): a cut metrics page or log must not read as a whole one."""
    head, body = {"content-length": (b"Content-Length: 1000\r\n", b"x" * 10),
                  "chunked": (b"Transfer-Encoding: chunked\r\n", b"3e8\r\n" + b"x" * 10)}[framing]
    server = loopback(lambda s, c: c.sendall(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n" + body))
    error, _ = _timed(lambda: reads.read(urllib.request.Request(server.url), reads.METRICS, 10.0))
    assert isinstance(error, http.client.IncompleteRead), error
    stream, _ = _timed(lambda: list(reads.urlopen(urllib.request.Request(server.url), reads.METRICS, 10.0).lines()))
    assert isinstance(stream, http.client.IncompleteRead), stream
    result = probe.chat_probe(server.url, "m", "p", 16, timeout=10.0)
    assert not result.ok and result.error.startswith("IncompleteRead")


def _chunk(text: str) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"


def test_an_endless_sse_stream_ends_the_probe_at_its_deadline(loopback):
    def endless(server: Loopback, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        while not server.stop.wait(0.05):
            connection.sendall(_chunk("again"))

    server = loopback(endless)
    result, elapsed = _timed(lambda: probe.chat_probe(server.url, "m", "p", 16, timeout=2.0))
    assert not result.ok and result.status is None
    assert result.error == (f"DeadlinePassed: a probe's SSE stream from {server.url}/v1/chat/completions "
                            "did not end within 2 s")
    assert elapsed < 2.0 + SLACK_SECONDS


def test_a_fast_endless_sse_stream_stops_at_its_size_limit(loopback):
    def flood(server: Loopback, connection: socket.socket) -> None:
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        block = _chunk("x" * 1000) * 64
        while not server.stop.is_set():
            connection.sendall(block)

    server = loopback(flood)
    result, elapsed = _timed(lambda: probe.chat_probe(server.url, "m", "p", 16, timeout=60.0))
    assert not result.ok
    assert result.error.startswith("TooLarge: a probe's SSE stream from") and "exceeds 1048576 bytes" in result.error


def _sse(usage_literal: str) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + _chunk("Hi")
            + b'data: {"choices": [], "usage": {"prompt_tokens": ' + usage_literal.encode()
            + b', "completion_tokens": 1}}\n\ndata: [DONE]\n\n')


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e309", "-1", "2.5", '"4096"', "true",
                                     str(1 << 63)])
def test_a_usage_count_that_is_not_a_count_fails_the_probe(loopback, literal):
    server = loopback(lambda s, c: c.sendall(_sse(literal)))
    result = probe.chat_probe(server.url, "m", "p", 16, timeout=10.0)
    assert not result.ok and result.prompt_tokens is None
    assert result.error is not None


def test_a_usage_count_that_is_a_count_passes_the_probe(loopback):
    server = loopback(lambda s, c: c.sendall(_sse("4096")))
    result = probe.chat_probe(server.url, "m", "p", 16, timeout=10.0)
    assert result.ok and (result.prompt_tokens, result.completion_tokens, result.completion) == (4096, 1, "Hi")


def test_a_chunked_stream_with_lines_split_across_chunks_is_read_whole(loopback):
    """Serve's HTTP server (uvicorn) sends the stream chunked; the bounded line reader must join a
    line that spans two chunks, as ``for line in response`` did."""
    def chunked(server: Loopback, connection: socket.socket) -> None:
        body = _sse("7").split(b"\r\n\r\n", 1)[1]
        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        for piece in (body[:10], body[10:45], body[45:]):
            connection.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        connection.sendall(b"0\r\n\r\n")

    server = loopback(chunked)
    result = probe.chat_probe(server.url, "m", "p", 16, timeout=10.0)
    assert result.ok and (result.prompt_tokens, result.completion) == (7, "Hi")


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e309", "-1"])
def test_a_failure_counter_that_is_not_a_count_is_refused_not_skipped(value):
    """Skipped, a NaN failure counter read as "absent", which an endpoint exporting vLLM's metrics
    turns into 0 failed transfers."""
    text = f'ray_vllm_num_requests_running{{a="1"}} 0\nray_vllm_nixl_num_failed_transfers_total{{a="1"}} {value}\n'
    with pytest.raises(metrics.Invalid, match="ray_vllm_nixl_num_failed_transfers_total is .*, not a count"):
        metrics.NixlTotals.of(text)


def test_a_series_the_gate_does_not_read_may_carry_anything():
    totals = metrics.NixlTotals.of('ray_vllm_cache_usage{a="1"} NaN\nray_vllm_nixl_num_failed_transfers_total 2\n')
    assert totals.failed == 2


@pytest.mark.parametrize("counters", ['{"d": {"tx_bytes": NaN}}', '{"d": {"tx_bytes": Infinity}}',
                                      '{"d": {"tx_bytes": 1e309}}', '{"d": {"tx_bytes": -5}}', '{"d": {"tx_bytes": 1.5}}',
                                      '{"d": {"tx_bytes": "12"}}', '{"d": {"tx_bytes": true}}', '{"d": [1]}', '[]',
                                      '{"d": {"tx_bytes": 9223372036854775808}}'])
def test_an_efa_reading_that_is_not_counts_is_refused(counters):
    with pytest.raises(ValueError):
        efa.parse_reading(f'{{"node": "n", "counters": {counters}}}')


def test_an_efa_reading_of_counts_is_read():
    assert efa.parse_reading(b'{"node": "n", "counters": {"d": {"tx_bytes": 9223372036854775807}}}') == \
        {"d": {"tx_bytes": (1 << 63) - 1}}


# --- the gate, end to end, against the fake deployment with one crafted answer ----------------------


def _gate(fake: FakeDeployment, **overrides: Any) -> tuple[Any, float]:
    kube = Kube(KubeAccess.with_token_file(fake.api_url, str(fake.token_file)))
    gate = Gate(GateSettings.from_json(fake.gate_settings(**overrides)), kube, Endpoints(kube))
    started = time.monotonic()
    return gate.run(), time.monotonic() - started


def test_the_fake_deployment_passes_in_process(fake: FakeDeployment):
    """The baseline of the tests below: each differs from it by one crafted answer."""
    report, _ = _gate(fake)
    assert report.verdict == "pass", report.reasons


@pytest.mark.parametrize("value", ["NaN", "+Inf", "-Inf", "1e309"])
def test_a_failure_counter_that_is_not_a_count_fails_the_gate(fake: FakeDeployment, value):
    def route(handler: Any, method: str, pod: str) -> None:
        page = generate_latest(fake.registries[pod])
        if pod == "decode":
            page += f'ray_vllm_nixl_num_failed_transfers_total{{ReplicaId="{fake.replicas[pod]}"}} {value}\n'.encode()
        handler.reply(200, page, "text/plain; version=0.0.4")

    fake.route_metrics = route  # type: ignore[method-assign]
    report, _ = _gate(fake)
    assert report.verdict == "fail"
    decode = fake.pod_name(fake.active, "decode")
    assert f"the metrics of {decode} cannot be used: ray_vllm_nixl_num_failed_transfers_total is " \
           f"{float(value)!r}, not a count" in report.reasons
    assert decode not in report.sections["kv"]["nixl"]["by_pod"]  # no figure computed from it


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "1e309", "-7"])
def test_efa_counters_that_are_not_counts_fail_the_gate(fake: FakeDeployment, literal):
    def route(handler: Any, node: str, backend: str) -> None:
        with urllib.request.urlopen(backend + handler.path, timeout=5) as response:
            body = re.sub(rb'"tx_bytes": \d+', b'"tx_bytes": ' + literal.encode(), response.read())
        handler.reply(200, body, "application/json")

    fake.route_counters = route  # type: ignore[method-assign]
    report, _ = _gate(fake)
    assert report.verdict == "fail"
    assert any(r.startswith("the EFA counters of ") and " are not a reading: " in r for r in report.reasons), report.reasons
    assert any(r.startswith("no EFA counter reading before and after the probes") for r in report.reasons)


@pytest.mark.parametrize("literal", [b"NaN", b"1e309", b'"4096"'])
def test_a_usage_that_is_not_a_count_fails_the_gate(fake: FakeDeployment, literal):
    original = fake.route_openai

    class Rewriting:
        def __init__(self, handler: Any) -> None:
            self.handler = handler

        def __getattr__(self, name: str) -> Any:
            return getattr(self.handler, name)

        @property
        def wfile(self) -> Any:
            raw = self.handler.wfile
            return type("W", (), {"write": lambda _, data: raw.write(
                re.sub(rb'"prompt_tokens": \d+', b'"prompt_tokens": ' + literal, data)), "flush": lambda _: raw.flush()})()

    fake.route_openai = lambda handler, method, path: original(Rewriting(handler), method, path)  # type: ignore[method-assign]
    report, _ = _gate(fake)
    assert report.verdict == "fail"
    assert report.reasons[0] == {b"NaN": "probe 1 failed: ValueError: NaN is not a finite number",
                                 b"1e309": "probe 1 failed: ValueError: 1e309 is not a finite number",
                                 b'"4096"': "probe 1 failed: the stream's usage is not a count: {'prompt_tokens': '4096'}"}[literal]
    assert report.sections["kv"]["predicted_bytes"] == 0


def test_an_endless_probe_stream_fails_the_gate_within_its_deadline(fake: FakeDeployment):
    stop = threading.Event()

    def route(handler: Any, method: str, path: str) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()
        while not stop.wait(0.05):
            handler.wfile.write(_chunk("more"))
            handler.wfile.flush()

    fake.route_openai = route  # type: ignore[method-assign]
    try:
        report, elapsed = _gate(fake, deadline_seconds=8)
    finally:
        stop.set()
    assert report.verdict == "fail"
    assert any("DeadlinePassed: a probe's SSE stream from" in r for r in report.reasons), report.reasons
    assert elapsed < 8 + SLACK_SECONDS


def test_a_dripping_metrics_endpoint_fails_the_gate_within_its_deadline(fake: FakeDeployment):
    stop = threading.Event()

    def route(handler: Any, method: str, pod: str) -> None:
        page = generate_latest(fake.registries[pod])
        if pod != "decode":
            return handler.reply(200, page, "text/plain; version=0.0.4")
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(page)))
        handler.end_headers()
        for byte in page:
            if stop.wait(0.1):
                return
            handler.wfile.write(bytes([byte]))
            handler.wfile.flush()

    fake.route_metrics = route  # type: ignore[method-assign]
    try:
        report, elapsed = _gate(fake, deadline_seconds=5)
    finally:
        stop.set()
    assert report.verdict == "fail"
    assert any("did not end within" in w for w in report.warnings), report.warnings
    assert elapsed < 5 + SLACK_SECONDS



def test_the_documented_limits_are_the_programs():
    """docs/verification.md ("Inputs") lists every limit: its table holds exactly :data:`reads.LIMITS`."""
    from pathlib import Path

    text = (Path(__file__).parents[2] / "docs" / "verification.md").read_text()
    rows = re.findall(r"^  \| ([^|]+?) \| (\d+) (MiB|KiB)", text, re.MULTILINE)
    assert {read: int(size) << (20 if unit == "MiB" else 10) for read, size, unit in rows} == \
        {limit.read: limit.max_bytes for limit in reads.LIMITS}


def test_continuous_verification_publishes_a_failure_for_a_nan_failure_counter(fake: FakeDeployment, monkeypatch):
    """The CronJob's run (read-only, --publish) against moto's CloudWatch: ``TransportVerified`` 0,
    where a skipped NaN used to read as no failed transfer."""
    from test_gate_end_to_end import _continuous

    def route(handler: Any, method: str, pod: str) -> None:
        page = generate_latest(fake.registries[pod])
        if pod == "decode":
            page += f'ray_vllm_nixl_num_failed_transfers_total{{ReplicaId="{fake.replicas[pod]}"}} NaN\n'.encode()
        handler.reply(200, page, "text/plain; version=0.0.4")

    fake.route_metrics = route  # type: ignore[method-assign]
    code, published = _continuous(fake, monkeypatch)
    assert (code, published) == (1, [0.0])
