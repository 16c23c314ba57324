"""Named workloads: the three shapes whose answer to "does disaggregation pay off" differs.

Disaggregation moves prefill off the decode GPUs, at the price of a KV-cache transfer per request
and a second GPU pool. Long prompts with short answers load prefill and move the most KV bytes;
long answers load decode, where a colocated server suffers prefill interrupting its decode
batches; short chat is the everyday middle. Token counts are means, as AIPerf's ``--isl`` and
``--osl`` take them; every preset fits the reference ``model.max_model_len`` (4096).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Workload:
    name: str
    isl: int
    osl: int
    purpose: str


PRESETS: dict[str, Workload] = {w.name: w for w in (
    Workload("short-chat", isl=256, osl=256,
             purpose="everyday chat: prefill and decode both small; the baseline for the other two"),
    Workload("long-prompt", isl=3072, osl=64,
             purpose="retrieval or summarisation: prefill-bound, the most KV bytes per request; "
                     "where prefill no longer stalls decode batches and disaggregation should gain"),
    Workload("long-answer", isl=256, osl=1024,
             purpose="generation: decode-bound, few KV bytes; the prefill pool idles and "
                     "disaggregation pays for GPUs that do little"),
)}
