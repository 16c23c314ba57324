"""The two utilization sources of a bench level, served for real on loopback.

- :class:`CounterNode`: the gate's own EFA counter reader (``verification/efa.py``,
  ``make_server``, as the DaemonSet runs it) over a sysfs tree of one EFA device whose counter
  files the test writes, named as the EFA driver names a port's counters.
- :class:`DcgmServer`: a page in the DCGM exporter's Prometheus text format (:func:`dcgm_page`),
  with the labels dcgm-exporter puts on each GPU's series (``gpu``, ``UUID``, ``pci_bus_id``,
  ``device``, ``modelName``, ``Hostname``), served by ``http.server``.

Imported by the tests and by ``record_per_token_level.py`` (a module name of its own).
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from ray_llm_eks.verification import efa

EFA_PORT_COUNTERS = ("tx_bytes", "tx_pkts", "rx_bytes", "rx_pkts", "send_bytes", "recv_bytes",
                     "rdma_read_bytes", "rdma_read_resp_bytes")
"""A subset of the EFA driver's port counters (efa_verbs.c, ``EFA_DEFINE_PORT_STATS``)."""
VETH_COUNTERS = ("tx_bytes", "rx_bytes", "tx_packets", "rx_packets")
"""What the twin links into its tree: a veth's ``/sys/class/net/<dev>/statistics`` (twin/cluster.py)."""


class CounterNode:
    """One node's sysfs tree and the real counter reader over it, on 127.0.0.1."""

    def __init__(self, root: Path, device: str = "rdmap0s6", names: tuple[str, ...] = EFA_PORT_COUNTERS) -> None:
        self.root = root
        self.dir = root / "class" / "infiniband" / device / "ports" / "1" / "hw_counters"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.set(**dict.fromkeys(names, 0))
        self.server = efa.make_server(str(root), 0, "127.0.0.1")
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}{efa.COUNTER_PATH}"

    def set(self, **values: int) -> None:
        for name, value in values.items():
            (self.dir / name).write_text(f"{value}\n")

    def get(self, name: str) -> int:
        return int((self.dir / name).read_text())

    def add(self, **values: int) -> None:
        self.set(**{name: self.get(name) + value for name, value in values.items()})

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def dcgm_page(gpus: list[dict[str, float]], hostname: str = "ip-10-0-1-7") -> str:
    """DCGM exporter text for ``gpus`` (each: ``util``, ``used``, ``free``), with its HELP/TYPE lines
    and a series the bench does not read (power) in between."""
    lines = []
    for metric, key, help_text in (("DCGM_FI_DEV_GPU_UTIL", "util", "GPU utilization (in %)."),
                                   ("DCGM_FI_DEV_POWER_USAGE", None, "Power draw (in W)."),
                                   ("DCGM_FI_DEV_FB_FREE", "free", "Frame buffer memory free (in MiB)."),
                                   ("DCGM_FI_DEV_FB_USED", "used", "Frame buffer memory used (in MiB).")):
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} gauge"]
        for index, gpu in enumerate(gpus):
            labels = (f'gpu="{index}",UUID="GPU-{index:08d}-0000-0000-0000-000000000000",'
                      f'pci_bus_id="00000000:{index + 0x30:02X}:00.0",device="nvidia{index}",'
                      f'modelName="NVIDIA L40S",Hostname="{hostname}",DCGM_FI_DRIVER_VERSION="570.133.20"')
            value = gpu[key] if key else 71.5
            lines.append(f"{metric}{{{labels}}} {value:g}")
    return "\n".join(lines) + "\n"


class DcgmServer:
    """Serves ``page`` (changeable) at ``/metrics``; counts the reads."""

    def __init__(self, page: str) -> None:
        self.page = page
        self.reads = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                outer.reads += 1
                body = outer.page.encode()
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
