"""The twin's hosts: Linux network namespaces on one bridge, made by the run and removed by it.

Ray rewrites a loopback node address to the machine's external one (Ray 2.58
``ray/_private/services.py``, ``node_ip_address_from_perspective``), so a Ray cluster on
127.0.0.1 would listen on, and send to, an address outside the run. Here every host, the
head and the client included, lives in a network namespace of its own whose only interfaces
are ``lo`` and one veth to a bridge in a further namespace; no namespace has a default route,
so nothing a twin process sends can leave the run's own subnet.

A veth stands for the node's EFA device: its byte counters (``/sys/class/net/eth0/statistics``
as seen from inside the namespace) are what the EFA counter reader serves.

Needs root (``ip netns``). Standard library only.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from dataclasses import dataclass, field
from typing import Sequence

PREFIX = "rle"
"""Every namespace of a twin run is named ``rle<run>-<host>``; ``<run>`` is the owning process id."""
DEVICE = "eth0"
"""The veth's name inside every host namespace."""
DEFAULT_SUBNET = "10.77.0.0/24"


class NetnsError(RuntimeError):
    pass


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    command = ["ip", *(["-n", netns] if netns else []), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise NetnsError(f"{' '.join(command)}: {result.stderr.strip() or result.stdout.strip()}")
    return result


def existing() -> list[str]:
    result = _ip("netns", "list", check=False)
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def kill_namespace_processes(name: str, match: str | None = None, *, spare: str | None = None,
                             pids: list[int] | None = None) -> int:
    """SIGKILL every process that lives in the network namespace ``name`` (Ray's daemons and
    workers outlive ``ray start`` in their own sessions, so a process group is not enough); with
    ``match``, only those whose command line contains it; with ``spare``, not those whose command
    line contains that. ``pids`` collects the pids killed."""
    try:
        inode = os.stat(f"/run/netns/{name}").st_ino
    except OSError:
        return 0
    killed = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}/ns/net").st_ino == inode:
                if match is not None or spare is not None:
                    with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                        text = cmdline.read()
                    if match is not None and match.encode() not in text:
                        continue
                    if spare is not None and spare.encode() in text:
                        continue
                os.kill(int(entry), 9)
                killed += 1
                if pids is not None:
                    pids.append(int(entry))
        except OSError:
            continue
    return killed


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """Wait until the processes ``pids`` have left the process table (a SIGKILLed process with
    much memory takes a moment to exit, and Ray's ``ray start`` finds a GCS still listed as running);
    returns those still there at the timeout."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if os.path.exists(f"/proc/{pid}") and not _zombie(pid)]
        if left:
            time.sleep(0.1)
    return left


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return False


def remove_stale() -> list[str]:
    """Remove the namespaces of earlier runs whose process is gone (a run killed with SIGKILL)."""
    removed = []
    for name in existing():
        if not name.startswith(PREFIX) or "-" not in name:
            continue
        run = name[len(PREFIX):].split("-", 1)[0]
        if run.isdigit() and not _alive(int(run)):
            kill_namespace_processes(name)
            _ip("netns", "delete", name, check=False)
            removed.append(name)
    return removed


@dataclass
class Network:
    """One bridge and a host namespace per name in ``hosts``, each with a fixed address."""

    hosts: Sequence[str]
    subnet: str = DEFAULT_SUBNET
    loopback_only: Sequence[str] = ()
    """Hosts with ``lo`` and nothing else: a node whose network never came up."""
    run: str = field(default_factory=lambda: str(os.getpid()))
    addresses: dict[str, str] = field(default_factory=dict)
    created: list[str] = field(default_factory=list)
    device: str = DEVICE
    """The interface whose byte counters stand in for a node's EFA counters (each namespace's veth)."""

    def __post_init__(self) -> None:
        network = ipaddress.ip_network(self.subnet)
        if not network.is_private:
            raise NetnsError(f"twin subnet {self.subnet} is not a private range")
        usable = list(network.hosts())
        if len(usable) < len(self.hosts) + 1:
            raise NetnsError(f"twin subnet {self.subnet} has too few addresses for {len(self.hosts)} hosts")
        self.prefix_length = network.prefixlen
        self.addresses = {host: str(usable[index + 1]) for index, host in enumerate(self.hosts)}

    def namespace(self, host: str) -> str:
        return f"{PREFIX}{self.run}-{host}"

    @property
    def switch(self) -> str:
        return f"{PREFIX}{self.run}-switch"

    def up(self) -> Network:
        remove_stale()
        try:
            self._add(self.switch)
            _ip("link", "add", "br0", "type", "bridge", netns=self.switch)
            _ip("link", "set", "br0", "up", netns=self.switch)
            for index, host in enumerate(self.hosts):
                ns = self.namespace(host)
                self._add(ns)
                outer = f"v{index}"
                _ip("link", "add", outer, "netns", self.switch, "type", "veth", "peer", "name", DEVICE, "netns", ns)
                _ip("link", "set", outer, "master", "br0", netns=self.switch)
                _ip("link", "set", outer, "up", netns=self.switch)
                _ip("addr", "add", f"{self.addresses[host]}/{self.prefix_length}", "dev", DEVICE, netns=ns)
                _ip("link", "set", DEVICE, "up", netns=ns)
            for host in self.loopback_only:
                self._add(self.namespace(host))
        except Exception:
            self.down()
            raise
        return self

    def _add(self, name: str) -> None:
        _ip("netns", "add", name)
        self.created.append(name)
        _ip("link", "set", "lo", "up", netns=name)

    def cut(self, host: str) -> None:
        """Take the host's link down: every connection to it stalls, as when a node drops off the fabric."""
        _ip("link", "set", DEVICE, "down", netns=self.namespace(host))

    def restore(self, host: str) -> None:
        _ip("link", "set", DEVICE, "up", netns=self.namespace(host))

    def counters(self, host: str) -> dict[str, int]:
        """The host veth's byte counters, from inside its namespace."""
        result = subprocess.run(["ip", "netns", "exec", self.namespace(host), "cat",
                                 f"/sys/class/net/{DEVICE}/statistics/tx_bytes",
                                 f"/sys/class/net/{DEVICE}/statistics/rx_bytes"],
                                capture_output=True, text=True, timeout=30, check=True)
        tx, rx = (int(v) for v in result.stdout.split())
        return {"tx_bytes": tx, "rx_bytes": rx}

    def exec_prefix(self, host: str) -> list[str]:
        return ["ip", "netns", "exec", self.namespace(host)]

    def kill_processes(self) -> int:
        """SIGKILL every process whose network namespace is one of this run's; returns how many."""
        return sum(kill_namespace_processes(name) for name in self.created)

    def down(self) -> None:
        self.kill_processes()
        for name in reversed(self.created):
            _ip("netns", "delete", name, check=False)
        self.created.clear()

    def __enter__(self) -> Network:
        return self.up()

    def __exit__(self, *exc: object) -> None:
        self.down()
