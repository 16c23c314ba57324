"""Record the two bench runs the fast tests of per-token pricing and utilization read.

    .venv/bin/python tests/bench/record_per_token_level.py

Both run the real command line and AIPerf against GuideLLM's mock server (TTFT 40 ms, ITL 5 ms,
16 output tokens), one level of 8 requests at concurrency 2, no agreement prompts:

- ``per-token``: a managed endpoint (no ``--config``), priced $0.15 / $0.60 per million input /
  output tokens, licence stated with ``--license``.
- ``utilization``: the disaggregated example deployment (hourly price from ``plan``), with the
  real EFA counter reader of two nodes (``prefill-0``, ``decode-0``: an EFA port's counters, which a
  thread raises every 0.1 s during the run as prefill sending and decode receiving would) and a
  DCGM exporter page per node (two GPUs each, fixed values).

Writes ``tests/data/bench/levels/{per-token,utilization}``: ``summary.json``, ``run.json`` and the
level's ``profile_export.jsonl`` and ``profile_export_aiperf.json`` (AIPerf's log and the rest of
its output stay in the temporary directory).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loopback import MockServers  # noqa: E402
from utilization_servers import CounterNode, DcgmServer, dcgm_page  # noqa: E402
from ray_llm_eks.twin.tiny_model import build_tokenizer  # noqa: E402

OUT = ROOT / "tests" / "data" / "bench" / "levels"
PRICES = ("0.15", "0.60")
GPUS = {"prefill-0": [{"util": 62, "used": 40100, "free": 5500}, {"util": 58, "used": 40200, "free": 5400}],
        "decode-0": [{"util": 35, "used": 43000, "free": 2600}, {"util": 41, "used": 42800, "free": 2800}]}
TICK = {"prefill-0": {"tx_bytes": 1_000_000, "send_bytes": 1_000_000, "rdma_read_resp_bytes": 3_000_000},
        "decode-0": {"rx_bytes": 1_000_000, "recv_bytes": 1_000_000, "rdma_read_bytes": 3_000_000}}
"""What each node's counters rise by every 0.1 s: decode reads prefill's KV cache (RDMA read)."""


def bench(*args: str) -> None:
    # `python -m` from the repository root: this checkout's code, whatever the virtualenv installed.
    result = subprocess.run([sys.executable, "-m", "ray_llm_eks.cli", "bench", *args], cwd=ROOT, text=True,
                            capture_output=True, env={**os.environ, "COLUMNS": "200"}, timeout=600)
    print(result.stdout[-2000:], result.stderr[-2000:])
    result.check_returncode()


def keep(run: Path, name: str) -> None:
    target = OUT / name
    shutil.rmtree(target, ignore_errors=True)
    (target / "raw" / "c2").mkdir(parents=True)
    shutil.copy(run / "summary.json", target / "summary.json")
    # As record_example.py: what depends on this machine (ports, a temporary directory) is written
    # as a placeholder, so a rerecording changes only the measured figures.
    text = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", (run / "run.json").read_text())
    data = json.loads(text)
    data["settings"]["tokenizer"] = "<local test tokenizer>"
    (target / "run.json").write_text(json.dumps(data, indent=2) + "\n")
    for file in ("profile_export.jsonl", "profile_export_aiperf.json"):
        shutil.copy(run / "raw" / "c2" / file, target / "raw" / "c2" / file)


def main() -> None:
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        servers = MockServers(tmp)
        nodes = {name: CounterNode(tmp / name) for name in GPUS}
        dcgm = {name: DcgmServer(dcgm_page(gpus)) for name, gpus in GPUS.items()}
        stop = threading.Event()

        def traffic() -> None:
            while not stop.wait(0.1):
                for name, tick in TICK.items():
                    nodes[name].add(**tick)

        try:
            url = servers.start("mock", "--ttft-ms", "40", "--ttft-ms-std", "0", "--itl-ms", "5",
                                "--output-tokens", "16")
            tokenizer = build_tokenizer(tmp / "tokenizer")
            common = ["--url", url, "--model", "tiny", "--tokenizer", str(tokenizer), "--isl", "32", "--osl", "16",
                      "--concurrency", "2", "--requests", "8", "--slo-ttft-ms", "200", "--slo-e2e-ms", "400",
                      "--agreement-prompts", "0"]
            bench(*common, "--price-per-million-input-tokens", PRICES[0], "--price-per-million-output-tokens",
                  PRICES[1], "--license", "apache-2.0", "--out", str(tmp / "per-token"))
            keep(tmp / "per-token", "per-token")
            thread = threading.Thread(target=traffic, daemon=True)
            thread.start()
            bench(*common, "--config", "examples/benchmark/disaggregated.yaml",
                  *[a for name, node in nodes.items() for a in ("--efa-counters-url", f"{name}={node.url}")],
                  *[a for name, server in dcgm.items() for a in ("--gpu-metrics-url", f"{name}={server.url}")],
                  "--out", str(tmp / "utilization"))
            stop.set()
            thread.join()
            keep(tmp / "utilization", "utilization")
        finally:
            stop.set()
            servers.stop()
            for node in nodes.values():
                node.stop()
            for server in dcgm.values():
                server.stop()
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
