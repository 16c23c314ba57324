"""The bench waits for the NIXL histogram to be exported before it measures (Ray exports it only
after a replica's first transfer, at its next metrics export)."""

from __future__ import annotations

import itertools
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from ray_llm_eks.bench.runner import BenchSettings, prime_kv_metrics, warm_up

EXPORTED = 'ray_vllm_nixl_xfer_time_seconds_count{ReplicaId="a"} 1.0\n'


class Loopback(BaseHTTPRequestHandler):
    """A loopback handler that answers 200 with a body and logs nothing."""

    def reply(self, data: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        return


def start(handler: type[Loopback]) -> tuple[ThreadingHTTPServer, str]:
    """The server on a free loopback port, and its base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def serve(after_scrapes: int | None):
    """A /metrics endpoint that exports the histogram from its ``after_scrapes``-th scrape on (never
    with None): counted in scrapes, not seconds, so a loaded machine cannot move the moment."""
    scrapes = itertools.count(1)

    class Handler(Loopback):
        def do_GET(self):  # noqa: N802
            exported = after_scrapes is not None and next(scrapes) >= after_scrapes
            self.reply((EXPORTED if exported else "ray_vllm_num_requests_running 0\n").encode())

    server, url = start(Handler)
    return server, f"{url}/metrics"


def settings(url: str) -> BenchSettings:
    return BenchSettings(url="http://127.0.0.1:1", model="tiny", tokenizer="tiny", concurrency=(1,), requests=1,
                         isl=8, osl=8, hourly_cost_usd=1.0, metrics_urls=(url,))


def test_it_returns_once_the_histogram_is_exported():
    server, url = serve(after_scrapes=2)  # the first scrape finds nothing: the bench waits and reads again
    sent = []
    try:
        # A deadline no machine reaches before the second scrape: it only bounds a broken run.
        line = prime_kv_metrics(settings(url), wait_seconds=60, send=lambda: sent.append(1))
    finally:
        server.shutdown()
    assert sent == [1]
    assert "exports the NIXL histogram" in line


def test_it_gives_up_without_failing_the_run():
    server, url = serve(after_scrapes=None)
    try:
        line = prime_kv_metrics(settings(url), wait_seconds=1.5, send=lambda: None)
    finally:
        server.shutdown()
    assert "no endpoint exported" in line


def test_a_failed_priming_request_is_reported_not_raised():
    def refuse():
        raise ConnectionRefusedError("refused")

    line = prime_kv_metrics(settings("http://127.0.0.1:1/metrics"), wait_seconds=1, send=refuse)
    assert "priming request failed" in line


def test_the_warm_up_sends_its_requests_at_most_concurrency_at_a_time():
    """Under Ray the bench warms each level up itself (the engines' metrics export lags AIPerf's
    phases): every request is the level's shape, and no more than the level's slots are in flight."""
    lock, in_flight, peak, bodies = threading.Lock(), [0], [0], []
    release = threading.Barrier(2, timeout=30)  # both slots are filled before either answers

    class Chat(Loopback):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with lock:
                bodies.append(body)
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            release.wait()
            with lock:
                in_flight[0] -= 1
            self.reply(b'{"choices": []}')

    server, url = start(Chat)
    try:
        level = BenchSettings(url=url, model="tiny", tokenizer="tiny",
                              concurrency=(2,), isl=64, osl=16)
        failed = warm_up(level, requests=4, concurrency=2)
    finally:
        server.shutdown()
    assert (failed, len(bodies), peak[0]) == (0, 4, 2)
    assert {(b["model"], b["max_tokens"], b["ignore_eos"]) for b in bodies} == {("tiny", 16, True)}
    assert all(b["messages"][0]["content"].count("warm up") == 32 for b in bodies)


def test_a_warm_up_against_nothing_counts_its_failures():
    level = BenchSettings(url="http://127.0.0.1:9", model="tiny", tokenizer="tiny", request_timeout_s=5.0)
    assert warm_up(level, requests=3, concurrency=2) == 3
