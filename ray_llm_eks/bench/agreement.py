"""Greedy completions of a fixed prompt set, and how often two deployments agree on them.

With temperature 0 both topologies run the same model on the same prompt, so they should produce
the same tokens; the disaggregated one builds its decode state from a KV cache that crossed the
network. A transfer that corrupts or truncates that cache produces a fluent but different answer,
which latency and error counts never show. Agreement below 100 % is a reason to look, not proof of
corruption: floating-point reductions that depend on batch composition can flip a near-tie
between two tokens, so compare the first diverging position (late divergence on one prompt is
numerics; early divergence on many is the cache).

The prompts are fixed here (never generated), long enough to fill several KV blocks, and sent one
at a time so no batch mixes them. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.request
from dataclasses import asdict, dataclass
from typing import Any, Callable

PASSAGE = (
    "Amazon EKS runs the Kubernetes control plane across several Availability Zones. Worker nodes "
    "join the cluster through an access entry, pull images from a registry, and report their "
    "allocatable resources to the API server, which the scheduler reads when it places a pod. "
)

PROMPTS: tuple[str, ...] = (
    "List the first ten prime numbers, separated by commas.",
    "Translate into French: the cat sleeps on the warm windowsill.",
    "Write one sentence that explains what a key-value cache is in a transformer.",
    "Count from one to twenty in words.",
    "What is the capital of Australia? Answer in one word, then explain in one sentence.",
    "Write a haiku about network latency.",
    "Give three reasons a GPU might be idle while a model server is busy.",
    "Explain in two sentences why prefill is compute-bound and decode is memory-bound.",
    "Summarise the following text in one sentence.\n\n" + PASSAGE * 4,
    "Summarise the following text in one sentence.\n\n" + PASSAGE * 12,
    "Answer with the last word of the text below, and nothing else.\n\n" + PASSAGE * 20,
    "Continue this sequence for ten more terms: 2, 3, 5, 8, 13,",
    "Write a Python function that returns the median of a list.",
    "Name the planets of the solar system in order from the Sun.",
    "Rewrite in the passive voice: the operator deleted the cluster.",
    "Repeat the word 'transfer' eight times, separated by spaces.",
)
MAX_TOKENS = 64


@dataclass(frozen=True)
class Completion:
    prompt_sha256: str
    text: str
    completion_tokens: int | None
    finish_reason: str | None
    error: str | None = None
    reasoning: str = ""
    """What a reasoning parser moved out of ``content`` (vLLM's ``reasoning_content``, or
    ``reasoning``): a thinking model such as Qwen3.5 can spend all 64 tokens there, leaving an
    empty ``content`` on both sides that would agree trivially. Both are compared."""


def prompt_id(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:16]


def _post(url: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's endpoint
        return json.loads(response.read())


def record(base_url: str, model: str, *, count: int = len(PROMPTS), max_tokens: int = MAX_TOKENS,
           timeout: float = 300.0, post: Callable[[str, dict[str, Any], float], dict[str, Any]] = _post) -> dict[str, Any]:
    """Send the first ``count`` prompts one at a time with greedy decoding; never raises for a bad answer."""
    completions = []
    started = time.time()
    for prompt in PROMPTS[:count]:
        body = {"model": model, "messages": [{"role": "user", "content": prompt}], "temperature": 0,
                "top_p": 1, "seed": 0, "max_tokens": max_tokens, "stream": False}
        try:
            answer = post(base_url.rstrip("/") + "/v1/chat/completions", body, timeout)
            choice = answer["choices"][0]
            message = choice["message"]
            completions.append(Completion(prompt_id(prompt), message.get("content") or "",
                                          (answer.get("usage") or {}).get("completion_tokens"),
                                          choice.get("finish_reason"),
                                          reasoning=message.get("reasoning_content") or message.get("reasoning") or ""))
        except Exception as error:  # noqa: BLE001 - an error is a disagreement, recorded with its reason
            completions.append(Completion(prompt_id(prompt), "", None, None, f"{type(error).__name__}: {error}"))
    return {"model": model, "max_tokens": max_tokens, "temperature": 0, "started_at": started,
            "completions": [asdict(c) for c in completions]}


def _common_prefix(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _output(completion: dict[str, Any]) -> str:
    reasoning = completion.get("reasoning") or ""
    return reasoning + "\n" + completion["text"] if reasoning else completion["text"]


def agreement(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Exact-match rate over the prompts both runs recorded, and where they diverge.

    A prompt that failed on either side counts as a disagreement (a broken KV path may fail the
    request rather than corrupt it); ``errors`` says how many, and which side.
    """
    by_prompt = {c["prompt_sha256"]: c for c in b.get("completions", [])}
    compared = identical = 0
    divergences, errors = [], []
    for first in a.get("completions", []):
        second = by_prompt.get(first["prompt_sha256"])
        if second is None:
            continue
        compared += 1
        if first.get("error") or second.get("error"):
            errors.append({"prompt_sha256": first["prompt_sha256"], "a": first.get("error"), "b": second.get("error")})
            continue
        left, right = _output(first), _output(second)
        if left == right:
            identical += 1
        else:
            at = _common_prefix(left, right)
            divergences.append({"prompt_sha256": first["prompt_sha256"], "first_difference_at_char": at,
                                "a": left[at:at + 40], "b": right[at:at + 40]})
    return {"compared": compared, "identical": identical,
            "rate": identical / compared if compared else None, "divergences": divergences, "errors": errors,
            "same_max_tokens": a.get("max_tokens") == b.get("max_tokens")}
