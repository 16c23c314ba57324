"""The GPU profile's hosts: addresses of the loopback range on one machine, no namespaces.

The CPU twin puts every Ray node in a network namespace of its own (:mod:`.netns`), which needs
``ip`` (iproute2) and a kernel with network namespaces and veth. A lent GPU machine may have
neither (the one this was run on had no ``ip``), and one GPU must serve both legs anyway, so the
GPU profile runs every node on the host, each with an address of its own in 127.0.0.0/8. Ray
rewrites only ``localhost``, ``127.0.0.1`` and ``::1`` to the machine's external address (Ray
2.58 ``ray/_private/services.py:786-819``, ``resolve_ip_for_localhost``), so nodes on 127.0.0.2,
127.0.0.3 and 127.0.0.4 keep their addresses: each raylet, metrics port and NIXL side channel
binds its own, as on separate pods.

What this loses, listed in the profile's changes: there is no per-node link. Every byte between
the nodes crosses ``lo``, which also carries Ray's control traffic and the HTTP probes, so the
"EFA" counters the gate reads here (``lo``'s) prove nothing about the KV path; and a node's link
cannot be cut (no drills). Standard library only.
"""

from __future__ import annotations

import os
import socket
import socketserver
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

DEVICE = "lo"
"""The interface whose byte counters stand in for a node's EFA counters (shared by every node)."""
FIRST_ADDRESS = 2
"""127.0.0.1 is rewritten by Ray; the hosts take 127.0.0.2 onwards."""
PREFIX = "rle"


class HostNetworkError(RuntimeError):
    pass


@dataclass
class HostNetwork:
    """The interface of :class:`.netns.Network` that :class:`.cluster.Twin` uses, on the host."""

    hosts: Sequence[str]
    ray_bin: Path | None = None
    """The environment's ``bin`` folder: :meth:`down` runs its ``ray stop --force``, since Ray's
    daemons leave ``ray start``'s process group and no namespace ends them here."""
    run: str = field(default_factory=lambda: str(os.getpid()))
    addresses: dict[str, str] = field(default_factory=dict)
    device: str = DEVICE
    forwarders: list[socketserver.ThreadingTCPServer] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.addresses = {host: f"127.0.0.{FIRST_ADDRESS + index}" for index, host in enumerate(self.hosts)}

    def namespace(self, host: str) -> str:
        """No namespace: an empty name, which :func:`.netns.kill_namespace_processes` finds nothing under."""
        return ""

    def exec_prefix(self, host: str) -> list[str]:
        return []

    def up(self) -> HostNetwork:
        return self

    def counters(self, host: str) -> dict[str, int]:
        base = Path("/sys/class/net") / self.device / "statistics"
        return {name: int((base / name).read_text()) for name in ("tx_bytes", "rx_bytes")}

    def cut(self, host: str) -> None:
        raise HostNetworkError("the GPU profile's nodes share the host's loopback: a node's link cannot be cut")

    restore = cut

    def forward(self, host: str, port: int, target_port: int) -> None:
        """Accept on ``host``'s address and ``port`` and relay each connection to ``target_port`` there.

        Ray's metrics agent binds its port on every interface unless the node is ``127.0.0.1``
        (Ray 2.58 ``dashboard/modules/reporter/reporter_agent.py:512-513``), so nodes sharing a
        host cannot all take KubeRay's 8080: each takes a port of its own, and this relay gives
        the gate the pod-IP:8080 it reads."""
        address = self.addresses[host]

        class Relay(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with socket.create_connection((address, target_port), timeout=30) as upstream:
                    def pump(source: socket.socket, sink: socket.socket) -> None:
                        try:
                            while data := source.recv(65536):
                                sink.sendall(data)
                        except OSError:
                            pass
                        finally:
                            try:
                                sink.shutdown(socket.SHUT_WR)
                            except OSError:
                                pass
                    back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
                    back.start()
                    pump(self.request, upstream)
                    back.join(timeout=60)

        server = socketserver.ThreadingTCPServer((address, port), Relay)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        self.forwarders.append(server)

    def kill_processes(self) -> int:
        if self.ray_bin is None:
            return 0
        result = subprocess.run([str(self.ray_bin / "ray"), "stop", "--force"], capture_output=True, text=True,
                                timeout=120, check=False)
        return result.returncode

    def down(self) -> None:
        for server in self.forwarders:
            server.shutdown()
            server.server_close()
        self.forwarders.clear()
        self.kill_processes()

    def __enter__(self) -> HostNetwork:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
