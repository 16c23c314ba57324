"""EFA byte counters of a node, read from sysfs, and the small HTTP reader that serves them.

The EFA driver exposes per-device hardware counters (Linux ``drivers/infiniband/hw/efa/efa_verbs.c``)
under ``/sys/class/infiniband/<device>/ports/1/hw_counters/``: ``tx_bytes``, ``rx_bytes``,
``send_bytes``, ``recv_bytes``, ``rdma_read_bytes``, ``rdma_read_resp_bytes`` and, on newer
drivers, ``rdma_write_bytes`` / ``rdma_write_recv_bytes``. The awsome-distributed-training EFA
node exporter reads the same files. G-series instances have no GPUDirect RDMA and may keep every
``rdma_*`` counter at 0, so the bytes a node sent are the larger of ``tx_bytes`` and the RDMA
bytes it served, and likewise for received (docs/verification.md, "Thresholds").

In the cluster, a DaemonSet on the GPU nodes runs ``python -m <package> efa-counters`` with the
host's ``/sys`` mounted read-only; the gate reads each pod's ``GET /counters`` (JSON) before and
after its probes. Standard library only: it runs in the serving image, which is already on the node.
"""

from __future__ import annotations

import json
import os
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Mapping

from . import reads
from .shared import wire

COUNTER_PORT = wire.EFA_COUNTER_PORT
COUNTER_PATH = wire.EFA_COUNTER_PATH
SENT = ("tx_bytes", "send_bytes")
SENT_RDMA = ("rdma_read_resp_bytes", "rdma_write_bytes")
RECEIVED = ("rx_bytes", "recv_bytes")
RECEIVED_RDMA = ("rdma_read_bytes", "rdma_write_recv_bytes")

Counters = dict[str, dict[str, int]]
"""device -> counter name -> value."""


def read_counters(sysfs: str | os.PathLike[str] = "/sys") -> Counters:
    """Every EFA device's port-1 hardware counters; empty when the node has no EFA device."""
    root = Path(sysfs) / "class" / "infiniband"
    result: Counters = {}
    if not root.is_dir():
        return result
    for device in sorted(root.iterdir()):
        counters_dir = device / "ports" / "1" / "hw_counters"
        if not counters_dir.is_dir():
            continue
        values: dict[str, int] = {}
        for counter in sorted(counters_dir.iterdir()):
            try:
                values[counter.name] = int(counter.read_text().strip())
            except (OSError, ValueError):
                continue  # a counter the driver refuses to read (or a directory) is skipped
        result[device.name] = values
    return result


def parse_reading(body: bytes | str) -> Counters:
    """The counters of a ``GET /counters`` answer. ValueError unless it is ``{"counters": {device:
    {counter: count}}}`` with every count an integer in [0, 2**63) (:func:`.reads.count`): the
    driver's counters are unsigned integers, so ``NaN``, a float, a string or a negative value is
    not a reading, and a node without one fails the KV check."""
    answer = reads.json_loads(body)
    counters = answer.get("counters") if isinstance(answer, dict) else None
    if not isinstance(counters, dict) or not all(
            isinstance(values, dict) and all(reads.count(v) is not None for v in values.values())
            for values in counters.values()):
        raise ValueError("the answer is not a map of EFA devices to their counters' non-negative integers")
    return counters


def _side(values: Mapping[str, int], plain: tuple[str, ...], rdma: tuple[str, ...]) -> int:
    return max(max((values.get(name, 0) for name in plain), default=0), sum(values.get(name, 0) for name in rdma))


def node_delta(before: Counters, after: Counters) -> dict[str, Any]:
    """Bytes a node sent and received over EFA between two readings, summed over its devices.

    A counter that went down (device reset, driver reload) counts from zero.
    """
    sent = received = 0
    by_device: dict[str, dict[str, int]] = {}
    for device, values in after.items():
        old = before.get(device, {})
        delta = {name: value - old.get(name, 0) if value >= old.get(name, 0) else value
                 for name, value in values.items()}
        by_device[device] = {k: v for k, v in delta.items() if k.endswith("bytes")}
        sent += _side(delta, SENT, SENT_RDMA)
        received += _side(delta, RECEIVED, RECEIVED_RDMA)
    return {"devices": sorted(after), "sent_bytes": sent, "received_bytes": received, "by_device": by_device}


def serve(sysfs: str, port: int = COUNTER_PORT, host: str = "0.0.0.0") -> None:  # pragma: no cover - runs in pods
    """Serve ``GET /counters`` (JSON of :func:`read_counters`) and ``GET /healthz`` until killed."""
    server = make_server(sysfs, port, host)
    server.serve_forever()


def make_server(sysfs: str, port: int = COUNTER_PORT, host: str = "0.0.0.0") -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # per recv: a client that never finishes its request frees its thread

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path == COUNTER_PATH:
                body = json.dumps({"node": os.environ.get("NODE_NAME", ""), "counters": read_counters(sysfs)}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
            elif self.path == "/healthz":
                body = b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
            else:
                body = b"not found"
                self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the gate polls it
            return

    return ThreadingHTTPServer((host, port), Handler)
