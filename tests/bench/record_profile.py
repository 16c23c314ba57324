"""Record the planner's profile fixture: ``bench --profile-isl`` against GuideLLM's mock server.

    PYTHONPATH=$PWD .venv/bin/python tests/bench/record_profile.py

The mock stands in for a deployment told TTFT 40 ms and ITL 6 ms, serving at most 4 requests at
once (the rest queue, so TTFT grows with concurrency past 4 and ITL does not). It is benchmarked
with the real command line, priced as ``examples/benchmark/disaggregated.yaml``: decode levels at
concurrency 1, 4 and 8 (prompt 128, answer 16 tokens), then prefill levels at concurrency 1 for
prompts of 64, 256 and 1024 tokens. The mock's TTFT does not grow with the prompt, so the profile
is flat in prompt length: it demonstrates the file and ``plan --profile``, not a measurement.

Writes ``tests/data/bench/runs/profile`` (profile.json, summary.json, run.json; AIPerf's raw
output stays in the temporary directory).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from loopback import MockServers, keep_run  # noqa: E402

from ray_llm_eks.twin.tiny_model import build_tokenizer  # noqa: E402

TARGET = ROOT / "tests" / "data" / "bench" / "runs" / "profile"
SERVER = ["--ttft-ms", "40", "--ttft-ms-std", "0", "--itl-ms", "6", "--output-tokens", "16",
          "--max-concurrent-requests", "4"]
BENCH = ["--isl", "128", "--osl", "16", "--concurrency", "1,4,8", "--requests", "24", "--profile-isl", "64,256,1024",
         "--agreement-prompts", "0", "--config", "examples/benchmark/disaggregated.yaml"]


def main() -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    servers = MockServers(scratch)
    tokenizer = build_tokenizer(scratch / "tokenizer")
    out = scratch / "run"
    try:
        url = servers.start("profile", *SERVER)
        # This checkout's command line (the ray-llm-eks script may be another checkout's editable install).
        finished = subprocess.run([sys.executable, "-c", "from ray_llm_eks.cli import app; app()", "bench", "--url", url,
                                   "--model", "tiny", "--tokenizer", str(tokenizer), *BENCH, "--out", str(out)],
                                  cwd=ROOT, capture_output=True, text=True, timeout=900,
                                  env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"})
        print(finished.stdout, finished.stderr)
        finished.check_returncode()
    finally:
        servers.stop()
    keep_run(out, TARGET, ("profile.json", "summary.json", "run.json"))


if __name__ == "__main__":
    main()
