"""Record the three runs ``compare`` is tested on, and the worked example in docs/benchmark.md.

    .venv/bin/python tests/bench/record_example.py             # all three runs, then the report
    .venv/bin/python tests/bench/record_example.py --managed   # only the managed run, then the report

Two GuideLLM mock servers stand in for the two deployments, told latencies that make the outcome
known in advance: "disaggregated" answers with TTFT 60±10 ms and ITL 8 ms, "colocated" with TTFT
90±45 ms and ITL 11 ms (as if prefill interrupted its decode batches); both serve at most 16
requests at once and queue the rest. Each is benchmarked with the real command line, priced as
``examples/benchmark/disaggregated.yaml`` and ``colocated.yaml`` (the same nodes, so the same
hourly cost): the disaggregated stand-in must win. The figures demonstrate the method; they are
not a measurement of either topology.

A third mock stands in for a managed endpoint priced per token (:data:`MANAGED`): TTFT 70±15 ms,
ITL 9 ms, 32 requests at once. It is benchmarked with the same flags and no ``--config``. The
committed managed run was recorded while ``bench`` lacked the per-token flags
(``--price-per-million-input-tokens``/``-output-``, issue 27, written in parallel), so
:func:`price_per_token` prices the recorded run as they do, with :mod:`ray_llm_eks.bench.cost`'s
own functions: the input tokens of each level (the sum of ``input_sequence_length`` over the
measured requests of AIPerf's ``profile_export.jsonl``), ``price_basis: per-token``, no hourly
price, and ``run.json``'s ``model`` block (the mock's model is in no licence table: ``license``
null). Rerecording it with the flags (and ``--license``) is the next step; the report's figures
would change with the new run, and docs/benchmark.md's worked example with them.

Writes ``tests/data/bench/runs/{disaggregated,colocated,managed}`` (summary, run, agreement; AIPerf's
raw output stays in the temporary directory) and ``docs/benchmark-example/`` (``compare``'s report).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loopback import MockServers, keep_run, run_cli  # noqa: E402

from ray_llm_eks.bench import cost, runner  # noqa: E402
from ray_llm_eks.twin.tiny_model import build_tokenizer  # noqa: E402

RUNS = ROOT / "tests" / "data" / "bench" / "runs"
REPORT = ROOT / "docs" / "benchmark-example"
STAND_INS = {
    "disaggregated": (ROOT / "examples" / "benchmark" / "disaggregated.yaml",
                      ["--ttft-ms", "60", "--ttft-ms-std", "10", "--itl-ms", "8"]),
    "colocated": (ROOT / "examples" / "benchmark" / "colocated.yaml",
                  ["--ttft-ms", "90", "--ttft-ms-std", "45", "--itl-ms", "11"]),
}
MANAGED = ["--ttft-ms", "70", "--ttft-ms-std", "15", "--itl-ms", "9", "--output-tokens", "64",
           "--max-concurrent-requests", "32"]
PRICE_PER_MILLION = {"input": 0.15, "output": 0.60}
"""Illustrative per-token prices (USD per million tokens), not a vendor's."""
COMMON_SERVER = ["--output-tokens", "64", "--max-concurrent-requests", "16"]
BENCH = ["--isl", "128", "--osl", "64", "--concurrency", "1,2,4,8,16,32", "--requests", "64",
         "--slo-ttft-ms", "150", "--slo-e2e-ms", "1000"]


def _keep(out: Path, target: Path) -> None:
    keep_run(out, target, ("summary.json", "run.json", "agreement.json"))


def price_per_token(out: Path) -> None:
    """What ``bench --price-per-million-input-tokens X --price-per-million-output-tokens Y`` writes
    (issue 27's contract), applied to a run recorded without them."""
    run = json.loads((out / "run.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    price_in, price_out = PRICE_PER_MILLION["input"], PRICE_PER_MILLION["output"]
    for entry in summary:
        records = [json.loads(line) for line in (out / entry["raw"] / "profile_export.jsonl").read_text().splitlines()
                   if line.strip()]
        measured = [r for r in records if r.get("metadata", {}).get("benchmark_phase", "profiling") == "profiling"
                    and not r.get("error")]
        entry["input_tokens"] = int(sum(r["metrics"]["input_sequence_length"]["value"] for r in measured))
        tokens = (entry["input_tokens"], entry["output_tokens"], price_in, price_out)
        entry.update(
            hourly_cost_usd=None, price_basis=runner.PER_TOKEN,
            cost_per_accepted_response_usd=cost.usd_per_accepted_response_per_token(*tokens, entry["accepted_responses"]),
            cost_per_million_output_tokens_usd=cost.usd_per_million_output_tokens_per_token(*tokens))
    run["settings"].update(hourly_cost_usd=None, price_per_million_input_tokens_usd=price_in,
                           price_per_million_output_tokens_usd=price_out,
                           deployment={"kind": runner.MANAGED_ENDPOINT, "topology": None, "config": None, "region": None,
                                       "nodes": None, "price_table_as_of": None,
                                       "hourly_cost_source": None})
    run["model"] = {"source": None, "revision": None, "served_name": run["settings"]["model"], "image": None,
                    "image_digest": None, "license": None}
    (out / "run.json").write_text(json.dumps(run, indent=2))
    (out / "summary.json").write_text(json.dumps(summary, indent=2))


def main(managed_only: bool = False) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-example-"))
    servers = MockServers(scratch)
    tokenizer = build_tokenizer(scratch / "tokenizer")
    try:
        url = servers.start("managed", *MANAGED)
        out = scratch / "managed"
        print(run_cli("bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer), *BENCH, "--out", str(out),
                      "--hourly-cost-usd", "1").stdout)
        price_per_token(out)
        _keep(out, RUNS / "managed")
        for name, (config, server_args) in ({} if managed_only else STAND_INS).items():
            url = servers.start(name, *server_args, *COMMON_SERVER)
            out = scratch / name
            args = ["bench", "--url", url, "--model", "tiny", "--tokenizer", str(tokenizer), *BENCH, "--out", str(out),
                    "--config", str(config.relative_to(ROOT))]
            print(run_cli(*args).stdout)
            _keep(out, RUNS / name)
    finally:
        servers.stop()
    shutil.rmtree(REPORT, ignore_errors=True)
    # This checkout's compare (the ray-llm-eks script may be another checkout's editable install), from
    # the root with relative paths, which the report names; it exits 1 on `wait`, the report written either way.
    print(subprocess.run([sys.executable, "-c", "from ray_llm_eks.cli import app; app()", "compare",
                          *(str((RUNS / name).relative_to(ROOT)) for name in ("disaggregated", "colocated", "managed")),
                          "--out", str(REPORT.relative_to(ROOT))], cwd=ROOT, capture_output=True, text=True).stdout)


if __name__ == "__main__":
    main(managed_only="--managed" in sys.argv[1:])
