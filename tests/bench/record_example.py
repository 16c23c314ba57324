"""Record the two runs ``compare`` is tested on, and the worked example in docs/benchmark.md.

    .venv/bin/python tests/bench/record_example.py

Two GuideLLM mock servers stand in for the two deployments, told latencies that make the outcome
known in advance: "disaggregated" answers with TTFT 60±10 ms and ITL 8 ms, "colocated" with TTFT
90±45 ms and ITL 11 ms (as if prefill interrupted its decode batches); both serve at most 16
requests at once and queue the rest. Each is benchmarked with the real command line, priced as
``examples/benchmark/disaggregated.yaml`` and ``colocated.yaml`` (the same nodes, so the same
hourly cost): the disaggregated stand-in must win. The figures demonstrate the method; they are
not a measurement of either topology.

Writes ``tests/data/bench/runs/{disaggregated,colocated}`` (summary, run, agreement; AIPerf's raw
output stays in the temporary directory) and ``docs/benchmark-example/`` (``compare``'s report).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loopback import MockServers, run_cli  # noqa: E402
from ray_llm_eks.twin.tiny_model import build_tokenizer  # noqa: E402

RUNS = ROOT / "tests" / "data" / "bench" / "runs"
REPORT = ROOT / "docs" / "benchmark-example"
STAND_INS = {
    "disaggregated": (ROOT / "examples" / "benchmark" / "disaggregated.yaml",
                      ["--ttft-ms", "60", "--ttft-ms-std", "10", "--itl-ms", "8"]),
    "colocated": (ROOT / "examples" / "benchmark" / "colocated.yaml",
                  ["--ttft-ms", "90", "--ttft-ms-std", "45", "--itl-ms", "11"]),
}
COMMON_SERVER = ["--output-tokens", "64", "--max-concurrent-requests", "16"]
BENCH = ["--isl", "128", "--osl", "64", "--concurrency", "1,2,4,8,16,32", "--requests", "64",
         "--slo-ttft-ms", "150", "--slo-e2e-ms", "1000"]


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-example-"))
    servers = MockServers(scratch)
    tokenizer = build_tokenizer(scratch / "tokenizer")
    try:
        for name, (config, server_args) in STAND_INS.items():
            url = servers.start(name, *server_args, *COMMON_SERVER)
            out = scratch / name
            args = ["bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer), *BENCH, "--out", str(out),
                    "--config", str(config.relative_to(ROOT))]
            print(run_cli(*args).stdout)
            target = RUNS / name
            shutil.rmtree(target, ignore_errors=True)
            target.mkdir(parents=True)
            for file in ("summary.json", "run.json", "agreement.json"):
                data = json.loads((out / file).read_text())
                if file == "run.json":  # machine-specific paths out of the committed copy
                    data["settings"]["url"] = "http://127.0.0.1:PORT"
                    data["settings"]["tokenizer"] = "<local test tokenizer>"
                    data["settings"]["aiperf"] = None
                (target / file).write_text(json.dumps(data, indent=2) + "\n")
    finally:
        servers.stop()
    shutil.rmtree(REPORT, ignore_errors=True)
    print(run_cli("compare", str((RUNS / "disaggregated").relative_to(ROOT)),
                  str((RUNS / "colocated").relative_to(ROOT)), "--out", str(REPORT.relative_to(ROOT))).stdout)


if __name__ == "__main__":
    main()
