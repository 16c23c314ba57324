"""Real servers on loopback for the bench tests: GuideLLM's mock OpenAI server, and AIPerf itself.

Imported by the tests, the conftest and ``record_example.py`` (a module name of its own: the
suite has several ``conftest`` modules).

The mock server (``guidellm mock-server``, in the guidellm wheel; installed without its torch
dependency, which the mock server does not use: see the Makefile) sleeps the TTFT and ITL it is
told, so what AIPerf measures can be checked against what the server was told to produce.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, log: Path, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} not ready after {seconds} s:\n{log.read_text()[-3000:]}")


class MockServers:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[subprocess.Popen] = []

    def start(self, name: str, *args: str) -> str:
        program = BIN / "guidellm"
        if not program.exists():
            pytest.fail("guidellm is not installed in this environment: `make test` installs it (see the Makefile)")
        port = free_port()
        log = self.directory / f"{name}.log"
        process = subprocess.Popen([str(program), "mock-server", "--host", "127.0.0.1", "--port", str(port),
                                    "--model", "tiny", *args], stdout=log.open("w"), stderr=subprocess.STDOUT,
                                   env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
        self.processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_for(url + "/v1/models", process, log)
        return url

    def stop(self) -> None:
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run([str(BIN / "ray-llm-eks"), *args], capture_output=True, text=True, timeout=600,
                            env={**os.environ, "COLUMNS": "200"})
    if check and result.returncode != 0:
        raise AssertionError(f"ray-llm-eks {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return result


def read_json(path: Path):
    return json.loads(path.read_text())


def keep_run(out: Path, target: Path, files: tuple[str, ...]) -> None:
    """Copy a bench run's ``files`` from ``out`` to the committed ``target``, the machine-specific
    settings of run.json (the mock's URL, the local tokenizer, AIPerf's path) replaced."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for file in files:
        data = json.loads((out / file).read_text())
        if file == "run.json":  # machine-specific paths out of the committed copy
            data["settings"]["url"] = "http://127.0.0.1:PORT"
            data["settings"]["tokenizer"] = "<local test tokenizer>"
            data["settings"]["aiperf"] = None
        (target / file).write_text(json.dumps(data, indent=2) + "\n")



# The mock's timings: what AIPerf must find again. No spread (the mock's --ttft-ms-std is 0), so
# each request's floor is known: a drawn TTFT would make the floors, and the SLO split, a matter
# of chance.
TTFT_MS, ITL_MS, OUTPUT_TOKENS = 40.0, 5.0, 16
SLO_TTFT_MS, SLO_E2E_MS = 45.0, 400.0
LOOP_CLOCK_MS = 1.0
"""How much shorter than asked a sleep of the mock can be, whatever the load: Sanic runs on uvloop,
whose libuv clock counts whole milliseconds (``uv_now``, truncated) and is read when the loop
wakes, so a timer armed after that reading fires up to 1 ms before the wall-clock delay; each later
sleep of the same request is armed after the previous one fired, so the shortfall does not add up."""
LEVELS, REQUESTS = (1, 4), 24


def pd_requests_page(counts: dict[tuple[str, str], int]) -> str:
    """The conditional decode replica's counter as a Ray node's ``/metrics`` serves it: rendered by
    prometheus_client (Ray 2.58's exporter, ``ray/_private/prometheus_exporter.py``, writes through it),
    ``ray_`` prefixed, ``_total`` on the counter, Ray's own labels on each worker's series.
    ``counts``: (worker id, prefill path) -> requests so far."""
    from prometheus_client import CollectorRegistry, Counter, generate_latest

    from ray_llm_eks.base import wire

    registry = CollectorRegistry()
    counter = Counter("ray_" + wire.PD_REQUESTS_METRIC, "Requests by where their prompt was prefilled.",
                      ["Component", "SessionName", "Version", "WorkerId", wire.PD_PATH_TAG], registry=registry)
    for (worker, path), value in counts.items():
        counter.labels(Component="core_worker", SessionName="session_test", Version="2.58.1", WorkerId=worker,
                       **{wire.PD_PATH_TAG: path}).inc(value)
    return generate_latest(registry).decode()
