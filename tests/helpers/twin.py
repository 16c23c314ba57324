"""What the twin tests send and keep: HTTP to the twin, waiting, and the captures (the ``twin``
fixture of tests/twin/conftest.py starts the twin itself).

With ``RAY_LLM_EKS_TWIN_CAPTURE=DIR`` the tests also write what the real stack printed and exported
(worker logs, ``/metrics``) there: the fixtures of the fast tests are made so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

CAPTURE = os.environ.get("RAY_LLM_EKS_TWIN_CAPTURE")


def get(url: str, timeout: float = 15.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


def chat(url: str, model: str, prompt: str, max_tokens: int = 8) -> dict[str, Any]:
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                       "temperature": 0}).encode()
    request = urllib.request.Request(f"{url}/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def wait_until(check, seconds: float, what: str, interval: float = 2.0):
    """``check()``'s first truthy value within ``seconds``; fails the test with ``what`` otherwise."""
    deadline = time.monotonic() + seconds
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"waited {seconds:.0f} s for {what}")
        time.sleep(interval)


LOG_LINES_KEPT = re.compile(r"NIXL|nixl|libfabric|fabric|rail|Backend|UCX|plugin|fi_|KV Transfer")
"""What a captured worker log keeps: the lines of the KV path (a whole node log is megabytes)."""


def capture(name: str, text: str) -> None:
    if CAPTURE:
        if name.startswith("logs/"):
            text = "".join(f"{line}\n" for line in text.splitlines() if LOG_LINES_KEPT.search(line))
        path = Path(CAPTURE) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


THRESHOLD = 64
"""``disaggregation.min_prompt_tokens`` of the twin's conditional deployment (tests/twin/conftest.py):
between the tiny model's short and long prompts once its chat template is added."""
MIX_CONCURRENCY = "2"
"""The mixed runs' one level: both classes in flight together, at half the time of two levels."""
BENCH_REQUESTS = 12
"""Requests per concurrency level of every twin bench."""
MIX = "16,16:50;256,16:50"
"""The mixed workload of the conditional-disaggregation tests (``bench --mix``): half the prompts far
under their 64-token threshold once the tiny model's chat template is added, half far over it."""


def bench(twin, deployment: str, out: Path, *extra: str, config: Path | None = None,
          concurrency: str = "1,2") -> Path:
    """``ray-llm-eks bench`` from the client namespace against ``deployment`` (deployed by the caller),
    scraping both workers' metrics and EFA counter readers, at each ``concurrency``; ``extra`` adds
    the workload (``--isl/--osl`` or ``--mix``) and any other flag. ``config``: the configuration
    bench prices and checks against (default: the twin's, with the deployment's topology)."""
    from ray_llm_eks.twin import twin_profile
    from ray_llm_eks.verification import efa

    settings = twin.settings(deployment)
    topology = settings["topology"]
    if config is None:
        config = twin.workdir / f"{topology}.yaml"
        config.write_text(twin.config.read_text() + f"\ntopology: {topology}\n")
    nodes = {name: n for name, n in twin.deployments[deployment].nodes.items() if name != "head"}
    # Each worker's EFA counter reader (the twin's serves the node veth's bytes), named by its role.
    counters = [f"{name}=http://{n.address}:{settings['efa_counter_port']}{efa.COUNTER_PATH}" for name, n in nodes.items()]
    command = [sys.executable, "-m", "ray_llm_eks.cli", "bench", "--config", str(config), "--url", twin.openai_url,
               "--model", settings["model"], "--tokenizer", str(twin.environment.model),
               "--concurrency", concurrency, "--requests", str(BENCH_REQUESTS), "--out", str(out),
               "--slo-ttft-ms", "5000", "--slo-e2e-ms", "30000",
               "--metrics-flush-s", str(twin_profile.BENCH_METRICS_FLUSH_SECONDS),
               *[arg for n in nodes.values() for arg in ("--metrics-url", f"http://{n.address}:{settings['metrics_port']}/metrics")],
               *[arg for pair in counters for arg in ("--efa-counters-url", pair)], *extra]
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    print(result.stdout[-2500:])
    return out
