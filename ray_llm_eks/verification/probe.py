"""Probe chat completions of a known prompt length, streamed, timed to the first token.

Each prompt starts with a unique nonce, so no probe shares a prefix with another (or with
earlier traffic): a prefix-cache hit on the decode leg would skip the KV transfer the gate is
there to measure. The body is common English words, about one token each in the BPE vocabularies
of the models the package knows; the exact count comes back in the final usage chunk
(``stream_options.include_usage``, OpenAI's field, which vLLM and Ray Serve LLM honour) and the
predicted KV bytes use that count. Greedy decoding (``temperature`` 0) keeps the answers comparable
between runs. Standard library only: it runs inside the cluster.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

WORDS = ("the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with", "as", "at", "be")

Opener = Callable[[urllib.request.Request, float], Any]


def default_opener(request: urllib.request.Request, timeout: float) -> Any:
    return urllib.request.urlopen(request, timeout=timeout)


def probe_prompt(words: int, nonce: str | None = None) -> str:
    nonce = nonce or uuid.uuid4().hex
    body = " ".join(WORDS[i % len(WORDS)] for i in range(max(words, 1)))
    return f"Probe {nonce}. Ignore the following filler and reply with one short sentence. {body}"


@dataclass
class ProbeResult:
    status: int | None
    ok: bool
    ttft_ms: float | None
    e2e_ms: float | None
    prompt_tokens: int | None
    completion_tokens: int | None
    completion: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def chat_probe(url: str, model: str, prompt: str, max_tokens: int, *, timeout: float = 120.0,
               headers: dict[str, str] | None = None, opener: Opener = default_opener) -> ProbeResult:
    """One streamed ``POST {url}/v1/chat/completions``; ok when it answered 200 with some text."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    request = urllib.request.Request(
        url.rstrip("/") + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "Accept": "text/event-stream", **(headers or {})},
    )
    started = time.monotonic()
    ttft = None
    pieces: list[str] = []
    usage: dict[str, Any] = {}
    try:
        with opener(request, timeout) as response:
            status = response.status
            for raw in response:
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if chunk.get("usage"):
                    usage = chunk["usage"]
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if text:
                        if ttft is None:
                            ttft = (time.monotonic() - started) * 1000.0
                        pieces.append(text)
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:300]
        return ProbeResult(error.code, False, None, _ms(started), None, None, "", f"HTTP {error.code}: {detail}")
    except (urllib.error.URLError, OSError, ValueError) as error:
        return ProbeResult(None, False, None, _ms(started), None, None, "", f"{type(error).__name__}: {error}")
    completion = "".join(pieces)
    ok = status == 200 and bool(completion)
    return ProbeResult(
        status=status, ok=ok, ttft_ms=ttft, e2e_ms=_ms(started),
        prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
        completion=completion, error=None if ok else "the stream carried no completion text",
    )


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000.0
