"""The relay between AIPerf and a Ray node's ``/metrics`` (:mod:`ray_llm_eks.bench.metrics_relay`).

The upstream here is what a Ray node runs (``ray/_private/prometheus_exporter.py``, Ray 2.58):
prometheus_client's WSGI app under ``wsgiref``, on loopback, with a registry of its own. AIPerf's
own collector judges reachability, as it does before each level.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.error
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from prometheus_client import CollectorRegistry, Histogram, make_wsgi_app

from ray_llm_eks.bench.metrics_relay import MetricsRelay


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def ray_node_metrics():
    registry = CollectorRegistry()
    histogram = Histogram("ray_vllm_nixl_xfer_time_seconds", "NIXL transfer time", registry=registry)
    histogram.observe(0.008)
    server = make_server("127.0.0.1", 0, make_wsgi_app(registry), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/metrics"
    server.shutdown()
    server.server_close()


def _fetch(url: str, method: str = "GET") -> tuple[int, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def test_the_node_answers_head_with_a_405_and_a_body(ray_node_metrics):
    """What trips AIPerf: a HEAD answer must have no body, this one has one."""
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(ray_node_metrics)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("HEAD", parts.path)
    response = connection.getresponse()
    assert response.status == 405
    assert int(response.getheader("Content-Length")) == len(b"# HTTP 405 Method Not Allowed: HEAD; use OPTIONS or GET\n")
    connection.close()


def test_the_relay_answers_head_as_the_node_answers_get_and_passes_get_through(ray_node_metrics):
    with MetricsRelay([ray_node_metrics]) as (relayed,):
        status, body = _fetch(relayed, "HEAD")
        assert (status, body) == (200, b"")
        status, body = _fetch(relayed)
        assert status == 200
        assert body == _fetch(ray_node_metrics)[1]
        assert b"ray_vllm_nixl_xfer_time_seconds_count 1.0" in body


def test_aiperf_finds_every_relayed_node_reachable(ray_node_metrics):
    from aiperf.server_metrics.data_collector import ServerMetricsDataCollector

    async def reachable(url: str) -> bool:
        return await ServerMetricsDataCollector(endpoint_url=url, reachability_timeout=10).is_url_reachable()

    with MetricsRelay([ray_node_metrics, ray_node_metrics]) as relayed:
        assert [asyncio.run(reachable(url)) for url in relayed * 5] == [True] * 10


def test_an_upstream_that_fails_stays_a_failure_and_other_paths_are_not_relayed():
    with MetricsRelay(["http://127.0.0.1:9/metrics"]) as (relayed,):  # the discard port: refused
        status, body = _fetch(relayed)
        assert status == 502 and b"127.0.0.1:9/metrics" in body
        assert _fetch(relayed.replace("/0/", "/1/"))[0] == 404
        assert _fetch(relayed.replace("/metrics", "/other"))[0] == 404


def test_the_relay_names_each_node_and_starts_nothing_without_one(ray_node_metrics):
    relay = MetricsRelay([ray_node_metrics])
    with relay as (relayed,):
        assert relay.names == {relayed: ray_node_metrics}
    with MetricsRelay([]) as none:
        assert none == ()
