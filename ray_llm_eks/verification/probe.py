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

import http.client
import json
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import asdict, dataclass
from typing import Any, Callable

from . import reads

WORDS = ("the", "of", "and", "to", "in", "is", "it", "that", "was", "for", "on", "are", "with", "as", "at", "be")

Opener = Callable[[urllib.request.Request, reads.Limit, float], reads.Response]
default_opener: Opener = reads.urlopen


def probe_prompt(words: int, nonce: str | None = None) -> str:
    nonce = nonce or uuid.uuid4().hex
    body = " ".join(WORDS[i % len(WORDS)] for i in range(max(words, 1)))
    return f"Probe {nonce}. Ignore the following filler and reply with one short sentence. {body}"


def short_prompt(nonce: str | None = None) -> str:
    """The local-class probe's prompt (``disaggregation.min_prompt_tokens``): a few words and an
    8-hex nonce, so that its tokens after the chat template stay below the smallest threshold a
    deployment uses: 35 tokens with the twin's tiny model and its chat template, where
    :func:`probe_prompt` with one filler word is 90 (its 32-hex nonce costs about a token a
    character there). Which class a probe fell in is decided by the server's own
    ``usage.prompt_tokens``, not by this estimate."""
    return f"Probe {(nonce or uuid.uuid4().hex)[:8]}. Say hi."


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
    """One streamed ``POST {url}/v1/chat/completions``; ok when it answered 200 with some text.

    ``timeout`` bounds the whole stream (an endless one fails the probe then), which may carry at
    most :data:`.reads.PROBE_STREAM`. A chunk that is not the OpenAI shape, a number that is not
    finite, or a ``usage`` count that is not a non-negative integer fails the probe: its
    ``prompt_tokens`` sets the bytes the gate expects to cross EFA."""
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
        with opener(request, reads.PROBE_STREAM, timeout) as response:
            status = response.status
            for raw in response.lines():
                line = raw.decode(errors="replace").strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = reads.json_loads(data)
                if chunk.get("usage"):
                    usage = dict(chunk["usage"])
                for choice in chunk.get("choices") or ():
                    delta = choice.get("delta") or {}
                    text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
                    if not isinstance(text, str):
                        raise ValueError(f"a chunk's text is not a string: {text!r:.80}")
                    if text:
                        if ttft is None:
                            ttft = (time.monotonic() - started) * 1000.0
                        pieces.append(text)
    except urllib.error.HTTPError as error:
        detail = error.read().decode(errors="replace")[:300]
        return ProbeResult(error.code, False, None, _ms(started), None, None, "", f"HTTP {error.code}: {detail}")
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError, AttributeError, TypeError) as error:
        # AttributeError, TypeError: a chunk, choice, delta or usage that is not a JSON object
        return ProbeResult(None, False, None, _ms(started), None, None, "", f"{type(error).__name__}: {error}"[:500])
    completion = "".join(pieces)
    counts = {key: usage.get(key) for key in ("prompt_tokens", "completion_tokens")}
    bad = {key: value for key, value in counts.items() if value is not None and reads.count(value) is None}
    ok = status == 200 and bool(completion) and not bad
    error = (None if ok else f"the stream's usage is not a count: {bad!r:.200}" if bad
             else "the stream carried no completion text")
    return ProbeResult(
        status=status, ok=ok, ttft_ms=ttft, e2e_ms=_ms(started),
        prompt_tokens=None if bad else counts["prompt_tokens"], completion_tokens=None if bad else counts["completion_tokens"],
        completion=completion, error=error,
    )


def _ms(started: float) -> float:
    return (time.monotonic() - started) * 1000.0
