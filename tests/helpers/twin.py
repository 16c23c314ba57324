"""What the twin tests send and keep: HTTP to the twin, waiting, and the captures (the ``twin``
fixture of tests/twin/conftest.py starts the twin itself).

With ``RAY_LLM_EKS_TWIN_CAPTURE=DIR`` the tests also write what the real stack printed and exported
(worker logs, ``/metrics``) there: the fixtures of the fast tests are made so.
"""

from __future__ import annotations

import json
import os
import re
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
