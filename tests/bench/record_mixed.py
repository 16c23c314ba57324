"""Record the mixed-workload runs the per-class tests read: ``bench --mix`` with a prefill threshold.

    PYTHONPATH=$PWD .venv/bin/python tests/bench/record_mixed.py

Two GuideLLM mock servers stand in for a conditional disaggregated deployment
(``tests/data/bench/conditional.yaml``: ``disaggregation.min_prompt_tokens`` 64) and the colocated
one (``examples/benchmark/colocated.yaml``), both benchmarked with the real command line and AIPerf
on the mix :data:`MIX` (short prompts 60 %, long ones 40 %). The mock counts a prompt's tokens
after its chat template and reports them as ``usage.prompt_tokens``, which AIPerf records (under
``--use-server-token-count``) and the bench classes each request by. Its TTFT does not depend on
the prompt: the classes' figures demonstrate the split, not a measurement of either path.

The disaggregated run also scrapes a page in Ray's format of the decode replica's counter
(:func:`loopback.pd_requests_page`, two workers), which a thread raises every 0.1 s as the replica
would count requests (local by 3, remote by 2): the bench reports its per-series deltas per level.

Writes ``tests/data/bench/runs/mixed-{disaggregated,colocated}``: summary, run and agreement, and
each level's ``profile_export.jsonl``, ``profile_export_aiperf.json`` and (when scraped)
``server_metrics_export.json`` under ``raw/`` (AIPerf's log and the rest stay in the temporary
directory).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loopback import MockServers, keep_run, pd_requests_page, run_cli  # noqa: E402
from utilization_servers import DcgmServer  # noqa: E402

from ray_llm_eks.twin.tiny_model import build_tokenizer  # noqa: E402

RUNS = ROOT / "tests" / "data" / "bench" / "runs"
MIX = "8,16:60;160,16:40"
THRESHOLD = 64
CONFIGS = {"disaggregated": "tests/data/bench/conditional.yaml", "colocated": "examples/benchmark/colocated.yaml"}
SERVER = {"disaggregated": ["--ttft-ms", "60", "--ttft-ms-std", "10", "--itl-ms", "8"],
          "colocated": ["--ttft-ms", "90", "--ttft-ms-std", "15", "--itl-ms", "11"]}
COMMON_SERVER = ["--output-tokens", "16", "--max-concurrent-requests", "16"]
BENCH = ["--mix", MIX, "--concurrency", "1,4", "--requests", "40", "--slo-ttft-ms", "150", "--slo-e2e-ms", "1000",
         "--agreement-prompts", "4"]
TICK = {("worker-a", "local"): 2, ("worker-b", "local"): 1, ("worker-a", "remote"): 1, ("worker-b", "remote"): 1}
RAW_FILES = ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.json")


def keep(out: Path, target: Path) -> None:
    keep_run(out, target, ("summary.json", "run.json", "agreement.json"))
    for entry in json.loads((out / "summary.json").read_text()):
        (target / entry["raw"]).mkdir(parents=True)
        for name in RAW_FILES:
            if (out / entry["raw"] / name).exists():
                shutil.copy(out / entry["raw"] / name, target / entry["raw"] / name)


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-mixed-"))
    servers = MockServers(scratch)
    tokenizer = build_tokenizer(scratch / "tokenizer")
    counts = dict.fromkeys(TICK, 0)
    page = DcgmServer(pd_requests_page(counts))
    stop = threading.Event()

    def count() -> None:
        while not stop.wait(0.1):
            for key, step in TICK.items():
                counts[key] += step
            page.page = pd_requests_page(counts)

    thread = threading.Thread(target=count, daemon=True)
    thread.start()
    try:
        for name, config in CONFIGS.items():
            url = servers.start(name, *SERVER[name], *COMMON_SERVER)
            out = scratch / name
            scrape = ["--metrics-url", page.url, "--metrics-flush-s", "2"] if name == "disaggregated" else []
            print(run_cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer), *BENCH, *scrape,
                          "--config", config, "--out", str(out)).stdout)
            keep(out, RUNS / f"mixed-{name}")
    finally:
        stop.set()
        thread.join()
        page.stop()
        servers.stop()


if __name__ == "__main__":
    main()
