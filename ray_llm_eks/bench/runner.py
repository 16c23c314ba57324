"""One benchmark run: AIPerf once per concurrency level, then ``summary.json`` from its output.

AIPerf 0.13 (``aiperf profile``) is driven as a program, not imported: its Python API is not
a published interface, its command line and export files are (``profile_export_aiperf.json``,
``profile_export.jsonl``, ``server_metrics_export.json``). What is read from them, and why:

- The tokenizer is loaded first, by AIPerf's own loader in AIPerf's Python (:func:`check_tokenizer`):
  a tokenizer that cannot load fails the run in seconds, with the library's reason. When AIPerf
  itself fails, its own reason (:func:`aiperf_reason`) comes before the path of its log.
- Client latencies (TTFT, ITL, end-to-end) are AIPerf's own percentiles of the profiling phase.
- Token counts come from the server's ``usage`` (``--use-server-token-count``): counting with a
  client tokenizer that differs from the server's shifts ITL by the ratio of the two counts.
- Accepted responses are counted per request from ``profile_export.jsonl``: no error, at least one
  output token, TTFT and end-to-end latency within both SLOs. AIPerf's ``--goodput`` applies the
  same SLOs and is kept in the raw output as a cross-check.
- With a prefill threshold (``min_prompt_tokens``), each measured request is put in a class by the
  server's prompt count (``usage.prompt_tokens``, after the chat template): ``local`` below the
  threshold (prefilled on the decode replica), ``remote`` at or above it (the prefill leg), with TTFT
  and ITL percentiles per class (``by_prefill_path``), and the decode replica's own count of each
  path (``pd_requests``) when its metrics are scraped.
- KV-transfer time is vLLM's ``nixl_xfer_time_seconds`` histogram (any of the spellings in
  :data:`METRIC_PREFIXES`), merged over every ``/metrics`` endpoint AIPerf scraped, as are the
  engines' own token counts, queue time, peak KV-cache use and failed transfers (``server``).
  Ray's node endpoints are scraped through :mod:`.metrics_relay`, for ``metrics_flush_s`` after
  each level, after a warm-up sent here: Ray exports the engines' metrics up to 10 s late.
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable

from . import agreement, cost, utilization

try:  # the in-cluster bundle: beside this module (bundle.SHARED)
    from . import histogram  # type: ignore[attr-defined]
except ImportError:  # the repository: the base layer's, which the gate reads percentiles with too
    from ..base import histogram  # type: ignore[no-redef]
try:
    from . import wire  # type: ignore[attr-defined]
except ImportError:
    from ..base import wire  # type: ignore[no-redef]
from .metrics_relay import MetricsRelay

AIPERF_VERSION = "0.13.0"
HOURLY, PER_TOKEN = "hourly", "per-token"
"""``price_basis`` of a level: the deployment's hourly price, or an endpoint's price per token."""
DEPLOYMENT, MANAGED_ENDPOINT = "deployment", "managed-endpoint"
"""``run.json`` ``settings.deployment.kind``: this library's deployment, or an endpoint priced per token."""
"""The version the extra ``bench`` pins and the export format below was read from."""
SUMMARY_FILE = "summary.json"
RUN_FILE = "run.json"
AGREEMENT_FILE = "agreement.json"
RAW_DIR = "raw"
METRICS_RELAY_FILE = "metrics_relay.json"
PROFILE_FILE = "profile.json"
"""The planner's performance profile (``bench --profile-isl``; ``plan --profile RUN_DIR`` reads it):
docs/benchmark.md, "A profile for the planner"."""
PROFILE_FORMAT = 1
PROFILE_PERCENTILES = ("p50", "p90", "p95", "p99")
"""AIPerf's aggregate has p90 (``profile_export_aiperf.json``), which the planner sizes for; the
summary keeps its own three."""
PREFILL_LEVEL_OSL = 8
"""Answer tokens of a prefill level: TTFT is what it measures, a short answer keeps the level short."""
PERCENTILES = ("p50", "p95", "p99")
METRIC_PREFIXES = ("vllm:", "ray_vllm_", "vllm_")
"""vLLM's own spelling, and Ray's re-export of it (``ray_`` prefix, ``:`` to ``_``)."""
KV_TRANSFER_METRIC = "nixl_xfer_time_seconds"
PD_REQUESTS_SERIES = "ray_" + wire.PD_REQUESTS_METRIC
"""The conditional decode replica's counter (``ray_llm_eks.pd.conditional``) as AIPerf exports it: Ray
prefixes ``ray_`` and exposes ``..._total``, and AIPerf names a counter by its family, whose ``_total``
the Prometheus parser strips (``prometheus_client/parser.py``, the family of
``ray_rayllmeks_pd_requests_total`` is ``ray_rayllmeks_pd_requests``)."""
PATH_PERCENTILES = ("p50", "p90", "p99")
"""The per-class TTFT and ITL percentiles (``by_prefill_path``): p90 is what the planner sizes for."""
PROMPT_TOKENS_SOURCE = ("usage.prompt_tokens: the server's count after the chat template (AIPerf's "
                        "input_sequence_length under --use-server-token-count)")
"""What a request is classed by: the count the decode replica compares with its threshold."""
MIX_FORM = ("ISL,OSL:PCT pairs separated by ';' (whole numbers of tokens >= 1, percentages above 0 "
            "summing to 100), e.g. 32,64:70;512,64:30")
"""The one form ``--mix`` takes: AIPerf 0.13's ``--seq-dist`` semicolon form without its stddev."""
MAX_METRICS_FLUSH_S = 30.0
"""AIPerf 0.13's bound on ``AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD`` (``common/environment.py``)."""


class BenchError(Exception):
    """The run cannot start or its output cannot be read; the message says which and why.

    ``problems`` holds ``(setting, sentence)`` pairs when settings are refused, so the command
    line can name its own flag for each setting (``slo_ttft_ms`` is ``--slo-ttft-ms``).
    """

    def __init__(self, message: str, problems: list[tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.problems = problems or []


class BenchIncomplete(BenchError):
    """AIPerf stopped before the level's requests were sent, or a level served no request."""


@dataclass(frozen=True)
class BenchSettings:
    """Everything a run needs; ``ray-llm-eks bench`` builds it from its flags and the deployment."""

    url: str
    model: str
    tokenizer: str
    """A Hugging Face id or a local directory: AIPerf builds prompts of ``isl`` tokens with it."""
    concurrency: tuple[int, ...] = (1,)
    requests: int = 100
    """Requests measured per concurrency level (after the warm-up)."""
    isl: int = 256
    osl: int = 256
    slo_ttft_ms: float | None = None
    slo_e2e_ms: float | None = None
    hourly_cost_usd: float | None = None
    price_per_million_input_tokens_usd: float | None = None
    """A managed endpoint's price of a million input tokens (with the output price, instead of an
    hourly cost): the level's cost is then that of the tokens it served (:mod:`.cost`)."""
    price_per_million_output_tokens_usd: float | None = None
    trace: str | None = None
    """A Mooncake-format trace (JSON lines with ``input_length``, ``output_length``, ``hash_ids``,
    ``timestamp``): its requests replace the synthetic ``isl``/``osl`` prompts."""
    replay_timestamps: bool = False
    """With ``trace``: send at the trace's timestamps (one level) instead of at each concurrency."""
    metrics_urls: tuple[str, ...] = ()
    """Prometheus endpoints besides ``<url>/metrics`` (under Ray: each node's port 8080)."""
    metrics_flush_s: float = 12.0
    """Seconds AIPerf keeps scraping ``metrics_urls`` after a level's last response. Ray exports a
    worker's metrics to its node's ``/metrics`` every 10 s (``metrics_report_interval_ms``, 10000
    in Ray 2.58), so a level's last transfers show there up to 10 s late; AIPerf's own 2 s
    (``AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD``, at most 30 s) lost every KV transfer of a
    level shorter than one export on the local twin, and handed them to the next level."""
    warmup_requests: int | None = None
    """Default: one per concurrent slot, so the measured phase starts with warm connections."""
    ignore_eos: bool = True
    """Ask for exactly ``osl`` tokens (vLLM's ``ignore_eos``), so both topologies do the same work."""
    request_timeout_s: float = 600.0
    agreement_prompts: int = len(agreement.PROMPTS)
    profile_isls: tuple[int, ...] = ()
    """Prompt lengths of the prefill levels (``--profile-isl``): each is run at concurrency 1 with
    :data:`PREFILL_LEVEL_OSL` answer tokens after the concurrency levels, and :data:`PROFILE_FILE`
    records TTFT by prompt length and ITL by concurrency. Empty: no profile."""
    tokenizer_revision: str | None = None
    """The model revision (``model.revision``), so prompts are built with the deployed tokenizer."""
    seed: int = 0
    deployment: dict[str, Any] = field(default_factory=dict)
    """What was measured (topology, instance types, price table date); copied into ``run.json``."""
    aiperf: str | None = None
    """The ``aiperf`` program; default: beside this Python, then on ``PATH``."""
    efa_counters_urls: dict[str, str] = field(default_factory=dict)
    """Node name -> the gate's EFA counter reader on it (``http://<pod IP>:9475/counters``), read
    before and after each level (:mod:`.utilization`)."""
    gpu_metrics_urls: dict[str, str] = field(default_factory=dict)
    """Node name -> the DCGM exporter's Prometheus page on it, sampled during each level."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Node name -> ``role``, ``instance_type``, ``efa_line_rate_gbps`` (what the command line knew)."""
    gpu_sample_interval_s: float = utilization.GPU_SAMPLE_INTERVAL_S
    model_record: dict[str, Any] | None = None
    """``run.json``'s ``model`` block (source, revision, served name, image and digest, licence):
    the command line reads it from the deployment; carried here so the in-cluster Job writes it too."""
    mix: str | None = None
    """A mixed workload (``--mix``, :data:`MIX_FORM`): each request's prompt and answer lengths are
    drawn from these pairs by AIPerf's ``--seq-dist`` instead of ``isl``/``osl``, which then hold the
    mix's means (what the warm-up sends)."""
    min_prompt_tokens: int | None = None
    """The deployment's prefill threshold (``disaggregation.min_prompt_tokens``): each level's requests
    are split into ``local`` (fewer prompt tokens) and ``remote`` (at least as many) in
    ``by_prefill_path``. None: no split."""

    def __post_init__(self) -> None:
        problems: list[tuple[str, str]] = []
        if not self.concurrency or any(not isinstance(c, int) or c < 1 for c in self.concurrency):
            problems.append(("concurrency", f"each level must be a whole number >= 1 (got {list(self.concurrency)})"))
        elif len(set(self.concurrency)) != len(self.concurrency):
            problems.append(("concurrency", f"levels repeat (got {list(self.concurrency)}); accepted: distinct levels"))
        for name in ("requests", "isl", "osl"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                problems.append((name, f"must be a whole number >= 1 (got {value!r})"))
        for name in ("slo_ttft_ms", "slo_e2e_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                problems.append((name, f"must be a positive number of milliseconds (got {value!r})"))
        # Zero would make every response free and every comparison infinite.
        for name in ("hourly_cost_usd", "price_per_million_input_tokens_usd", "price_per_million_output_tokens_usd"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                problems.append((name, f"must be a positive price (got {value!r})"))
        token_prices = (self.price_per_million_input_tokens_usd, self.price_per_million_output_tokens_usd)
        if (token_prices[0] is None) != (token_prices[1] is None):
            missing = "price_per_million_input_tokens_usd" if token_prices[0] is None else "price_per_million_output_tokens_usd"
            problems.append((missing, "missing: a per-token price needs both the input and the output price; "
                                      "accepted: both, or neither"))
        if token_prices[0] is not None and self.hourly_cost_usd is not None:
            problems.append(("hourly_cost_usd", f"a run is priced per hour or per token, not both (got "
                                                f"{self.hourly_cost_usd!r} with per-token prices); accepted: one of them"))
        for name in ("efa_counters_urls", "gpu_metrics_urls"):
            for node, node_url in getattr(self, name).items():
                if not (isinstance(node, str) and node and isinstance(node_url, str)
                        and node_url.startswith(("http://", "https://"))):
                    problems.append((name, f"{node}={node_url} is not NODE=URL with an http(s) URL; "
                                           "accepted: e.g. prefill-0=http://10.0.1.7:9475/counters"))
        if not self.gpu_sample_interval_s > 0:
            problems.append(("gpu_sample_interval_s", f"must be a positive number of seconds (got {self.gpu_sample_interval_s!r})"))
        if self.replay_timestamps and not self.trace:
            problems.append(("replay_timestamps", "needs a trace to replay; accepted: with a trace file"))
        if self.replay_timestamps and len(self.concurrency) > 1:
            problems.append(("concurrency", f"a timestamp replay is one level, not a sweep (got {list(self.concurrency)})"))
        if not 0 <= self.metrics_flush_s <= MAX_METRICS_FLUSH_S:
            problems.append(("metrics_flush_s", f"between 0 and {MAX_METRICS_FLUSH_S:g} seconds, AIPerf's bound "
                                                f"(got {self.metrics_flush_s!r})"))
        if not 0 <= self.agreement_prompts <= len(agreement.PROMPTS):
            problems.append(("agreement_prompts",
                             f"between 0 and {len(agreement.PROMPTS)} (got {self.agreement_prompts})"))
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in self.profile_isls):
            problems.append(("profile_isls", f"each prompt length must be a whole number >= 1 (got "
                                             f"{list(self.profile_isls)})"))
        elif len(set(self.profile_isls)) != len(self.profile_isls):
            problems.append(("profile_isls", f"prompt lengths repeat (got {list(self.profile_isls)}); accepted: "
                                             "distinct lengths"))
        if self.mix is not None:
            try:
                parse_mix(self.mix)
            except ValueError as error:
                problems.append(("mix", f"{error} (got {self.mix!r}); accepted: {MIX_FORM}"))
            if self.trace:
                problems.append(("mix", "a trace brings its own lengths; accepted: --mix without --trace"))
            if self.profile_isls:
                problems.append(("profile_isls", "a profile measures one prompt length per level, not a mix; "
                                                 "accepted: without --mix"))
        if self.min_prompt_tokens is not None and (not isinstance(self.min_prompt_tokens, int)
                                                   or isinstance(self.min_prompt_tokens, bool)
                                                   or self.min_prompt_tokens < 1):
            problems.append(("min_prompt_tokens", f"a prompt length in tokens, a whole number >= 1 (got "
                                                  f"{self.min_prompt_tokens!r})"))
        if self.profile_isls and (self.trace or self.replay_timestamps):
            problems.append(("profile_isls", "a profile measures synthetic prompts of each length, not a trace; "
                                             "accepted: without --trace"))
        if problems:
            raise BenchError("; ".join(f"{name}: {sentence}" for name, sentence in problems), problems)

    @property
    def price_basis(self) -> str | None:
        """``hourly``, ``per-token``, or None (unpriced)."""
        if self.price_per_million_input_tokens_usd is not None:
            return PER_TOKEN
        return HOURLY if self.hourly_cost_usd is not None else None

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "concurrency": list(self.concurrency), "metrics_urls": list(self.metrics_urls),
                "profile_isls": list(self.profile_isls)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BenchSettings:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise BenchError(f"unknown bench settings: {', '.join(unknown)}; accepted: {', '.join(sorted(known))}")
        values = dict(data)
        for name in ("concurrency", "metrics_urls", "profile_isls"):
            if name in values:
                values[name] = tuple(values[name])
        return cls(**values)


def parse_mix(text: str) -> list[tuple[int, int, float]]:
    """``ISL,OSL:PCT;...`` as ``(isl, osl, percent)`` pairs, or ValueError with the first problem.

    AIPerf 0.13 parses the same form (``DistributionParser._parse_pairs_from_semicolon``,
    ``aiperf/common/models/sequence_distribution.py``) and requires the percentages to sum to 100
    within 1e-6 (``_validate_probability_sum``); this refuses at the command line what it would
    refuse after its start-up, and also what it would take but the bench does not: a stddev (a class
    split needs lengths that stay on their side of the threshold) and a pair of 0 %."""
    pairs = []
    for part in text.split(";"):
        match = re.fullmatch(r"\s*(\d+)\s*,\s*(\d+)\s*:\s*(\d+(?:\.\d+)?)\s*", part)
        if not match:
            raise ValueError(f"{part.strip()!r} is not ISL,OSL:PCT")
        isl, osl, percent = int(match[1]), int(match[2]), float(match[3])
        if isl < 1 or osl < 1:
            raise ValueError(f"{part.strip()!r}: token counts must be >= 1")
        if not 0 < percent <= 100:
            raise ValueError(f"{part.strip()!r}: a percentage above 0 and at most 100")
        pairs.append((isl, osl, percent))
    total = sum(p for _, _, p in pairs)
    if abs(total - 100) > 1e-6:
        raise ValueError(f"the percentages sum to {total:g}, not 100")
    return pairs


def mix_means(pairs: list[tuple[int, int, float]]) -> tuple[int, int]:
    """The mean prompt and answer lengths of a mix (whole tokens, at least 1)."""
    return (max(1, round(sum(i * p for i, _, p in pairs) / 100)), max(1, round(sum(o * p for _, o, p in pairs) / 100)))


def canonical_mix(pairs: list[tuple[int, int, float]]) -> str:
    return ";".join(f"{isl},{osl}:{percent:g}" for isl, osl, percent in pairs)


def find_aiperf(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    beside = Path(sys.executable).parent / "aiperf"
    if beside.exists():
        return str(beside)
    found = shutil.which("aiperf")
    if found:
        return found
    raise BenchError(f"aiperf is not installed: pip install 'ray-llm-eks[bench]' (AIPerf {AIPERF_VERSION}), "
                     "or name the program with --aiperf")


# --- the tokenizer, checked before AIPerf starts ---------------------------------------------------

TOKENIZER_CHECK_TIMEOUT_S = 120.0
"""The bound on the tokenizer check: a download of a large tokenizer on a slow link fits; a check
that hangs does not hold the run for longer."""
OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""What AIPerf 0.13 reads as offline mode (``aiperf/common/tokenizer.py``, ``_is_offline_mode``)."""

# Run by AIPerf's own Python: the same function AIPerf's services call to build prompts
# (``aiperf.common.tokenizer.Tokenizer.from_pretrained``, AIPerf 0.13.0), with the name, revision and
# environment AIPerf gets, so it succeeds or fails as AIPerf would (offline mode included: AIPerf
# 0.13 with HF_HUB_OFFLINE set refuses a local directory, which transformers alone would read).
# It stops at the first connection error huggingface_hub logs: that library retries each request
# five times with back-off (1+2+4+8+8 s), and AIPerf's load made two such requests without Hub
# access (46 s of tests/data/bench/aiperf_failures/hub-unreachable.log) before it said anything;
# the reason is the same on the first attempt.
# Prints one JSON line on the real stdout (from_pretrained swallows sys.stdout and sys.stderr).
_TOKENIZER_CHECK = r"""
import json, logging, os, sys, time
started = time.monotonic()
def done(ok, reason):
    sys.__stdout__.write(json.dumps({"ok": ok, "reason": reason, "seconds": time.monotonic() - started}) + "\n")
    sys.__stdout__.flush()
    os._exit(0)
class FirstNetworkError(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if "thrown while requesting" in message:
            done(False, message)
logging.getLogger("huggingface_hub").addHandler(FirstNetworkError())
try:
    from aiperf.common.tokenizer import Tokenizer
except ImportError as error:
    done(None, f"{type(error).__name__}: {error}")
try:
    Tokenizer.from_pretrained(sys.argv[1], trust_remote_code=False, revision=sys.argv[2])
except Exception as error:
    done(False, f"{type(error).__name__}: {error}")
done(True, "")
"""


def aiperf_python(program: str) -> str | None:
    """The Python that runs the ``aiperf`` program: its ``#!`` line, else a ``python3``/``python``
    beside it (a virtualenv's ``bin``, or the wrappers the in-cluster Job writes); None if neither."""
    path = Path(program)
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512).decode("utf-8", "replace").strip()
    except OSError:
        first = ""
    if first.startswith("#!"):
        words = first[2:].split()
        if words and Path(words[0]).name == "env" and len(words) > 1:
            words = [shutil.which(words[1]) or words[1]]
        if words and Path(words[0]).name.startswith("python") and Path(words[0]).exists():
            return words[0]
    for name in ("python3", "python"):
        beside = path.parent / name
        if beside.exists():
            return str(beside)
    return None


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def check_tokenizer(settings: BenchSettings, timeout_s: float = TOKENIZER_CHECK_TIMEOUT_S,
                    environment: dict[str, str] | None = None) -> str:
    """Load ``settings.tokenizer`` the way AIPerf will, before any level starts; returns the line to
    show. Raises :class:`BenchError` (setting ``tokenizer``) saying that it could not load, the
    library's reason in one line, and what to do."""
    program = find_aiperf(settings.aiperf)
    python = aiperf_python(program)
    name, revision = settings.tokenizer, settings.tokenizer_revision or "main"
    if python is None:
        return f"tokenizer {name!r}: not checked ({program} names no Python); AIPerf loads it itself"
    env = aiperf_environment(settings, environment)
    started = time.monotonic()
    try:
        finished = subprocess.run([python, "-c", _TOKENIZER_CHECK, name, revision], capture_output=True,
                                  text=True, env=env, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        outcome: dict[str, Any] = {"ok": False, "reason": f"it did not load within {timeout_s:g} s"}
    else:
        lines = [line for line in finished.stdout.splitlines() if line.startswith("{")]
        try:
            outcome = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            outcome = {"ok": False, "reason": _last_line(finished.stderr)
                       or f"the check exited with {finished.returncode} and printed nothing"}
    seconds = time.monotonic() - started
    if outcome["ok"] is None:  # an AIPerf without the module: the check cannot speak for it
        return f"tokenizer {name!r}: not checked ({_first_line(outcome['reason'])}); AIPerf loads it itself"
    if outcome["ok"]:
        return f"tokenizer {name!r} loads ({seconds:.1f} s)"
    offline = [v for v in OFFLINE_VARIABLES if env.get(v)]
    if offline and Path(name).is_dir():
        advice = (f"AIPerf {AIPERF_VERSION} reads a local directory only with {' and '.join(offline)} unset "
                  "(a local directory needs no Hub): unset it")
    else:
        advice = ("pass --tokenizer PATH with a local tokenizer directory (docs/benchmark.md, 'An offline "
                  "tokenizer'), or give this machine access to the Hugging Face Hub (HF_TOKEN for a gated model)")
    where = f" at revision {revision!r}" if revision != "main" else ""
    mode = f", offline mode: {', '.join(offline)} set" if offline else ""
    sentence = (f"the tokenizer {name!r}{where} could not load: {_first_line(outcome['reason'])} (checked in "
                f"{seconds:.1f} s before starting AIPerf{mode}). To fix: {advice}.")
    raise BenchError(f"tokenizer: {sentence}", [("tokenizer", sentence)])


# --- AIPerf's own reason when it fails -------------------------------------------------------------

_LOG_LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d+\s+(?P<level>[A-Z]+)\s+(?P<message>.*?)(?:\s+\([\w./-]+\.py:\d+\))?$")
_PANEL_FIELD = re.compile(r"^│\s*(?:• )?(?P<label>[A-Z][a-z]+):\s(?P<value>.*?)\s*│$")
_PANEL_MORE = re.compile(r"^│\s{3,}(?P<value>\S.*?)\s*│$")
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit):\s.+")


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def aiperf_reason(log_text: str, limit: int = 2) -> list[str]:
    """AIPerf 0.13's own reason for failing, from its console output (``aiperf.log``), at most
    ``limit`` lines, the cause first.

    Where AIPerf says it, in the order read: the Reason of the first error in its "AIPerf System Exit
    Errors" panel (``aiperf/controller/controller_utils.py``, ``print_exit_errors``, rewrapped by
    rich); else the last line of the last traceback (the tokenizer prefetch fails that way, before
    the services start, ``aiperf/common/tokenizer_validator.py``); and the first ERROR line of its
    log, the per-request error that the panel only points to ("see prior log output").
    """
    lines = log_text.splitlines()
    reasons: list[str] = []
    in_panel, field = False, None
    for line in lines:
        if "AIPerf System Exit Errors" in line:
            in_panel = True
            continue
        if not in_panel:
            continue
        if line.startswith("╰"):
            in_panel = False
            continue
        match = _PANEL_FIELD.match(line)
        if match:
            field = match["label"]
            if field == "Reason":
                reasons.append(match["value"])
            continue
        more = _PANEL_MORE.match(line)
        if more and field == "Reason" and reasons:
            reasons[-1] += " " + more["value"]
    # The first error of the panel is the cause; the ones after it wrap it (a HookError, a
    # LifecycleOperationError of the controller that waited for the failed service).
    reasons = reasons[:1]
    if not reasons:
        tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback (most recent call last)")]
        if tracebacks:
            last = next((line for line in lines[tracebacks[-1]:] if _EXCEPTION_LINE.match(line)), None)
            if last:
                reasons.append(last.strip())
    errors = [m["message"] for m in map(_LOG_LINE.match, lines) if m and m["level"] in ("ERROR", "CRITICAL")]
    if errors and not any(errors[0] in r or r in errors[0] for r in reasons):
        reasons.append(errors[0])
    if not reasons and _last_line(log_text):
        reasons.append(_last_line(log_text))
    unique = list(dict.fromkeys(" ".join(r.split()) for r in reasons))
    return unique[:limit]


def _aiperf_says(log_file: Path) -> str:
    """``AIPerf says: ...`` from its log, or nothing when the log cannot be read."""
    try:
        reasons = aiperf_reason(log_file.read_text(errors="replace"))
    except OSError:
        return ""
    return f"AIPerf says: {' / '.join(reasons)}. " if reasons else ""


def level_name(concurrency: int | None) -> str:
    return "trace-timestamps" if concurrency is None else f"c{concurrency}"


def level_warmup(settings: BenchSettings, concurrency: int) -> int:
    """The warm-up of a concurrency level: ``warmup_requests``, by default one per slot."""
    return settings.warmup_requests if settings.warmup_requests is not None else concurrency


def aiperf_command(settings: BenchSettings, concurrency: int | None, artifact_dir: Path, *, ui: str = "none") -> list[str]:
    """The ``aiperf profile`` command line of one level (``concurrency`` None: replay the trace's timestamps)."""
    command = [find_aiperf(settings.aiperf), "profile",
               "--model", settings.model, "--url", settings.url,
               "--endpoint-type", "chat", "--streaming", "--use-server-token-count",
               "--tokenizer", settings.tokenizer,
               *(["--tokenizer-revision", settings.tokenizer_revision] if settings.tokenizer_revision else []),
               "--random-seed", str(settings.seed),
               "--request-timeout-seconds", f"{settings.request_timeout_s:g}",
               "--no-gpu-telemetry", "--ui-type", ui,
               "--output-artifact-dir", str(artifact_dir)]
    if settings.trace:
        command += ["--custom-dataset-type", "mooncake_trace", "--input-file", settings.trace]
        command += ["--fixed-schedule"] if concurrency is None else ["--no-fixed-schedule"]
    elif settings.mix:
        # AIPerf draws each request's pair from the distribution and ignores --isl/--osl
        # (``BaseDatasetComposer._get_turn_sequence_lengths``, aiperf/dataset/composer/base.py@0.13.0).
        command += ["--seq-dist", settings.mix]
    else:
        command += ["--isl", str(settings.isl), "--osl", str(settings.osl)]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency), "--request-count", str(settings.requests)]
        warmup = level_warmup(settings, concurrency)
        if warmup:
            command += ["--warmup-request-count", str(warmup)]
    if settings.ignore_eos:
        command += ["--extra-inputs", "ignore_eos:true"]
    goodput = [f"time_to_first_token:{settings.slo_ttft_ms:g}"] if settings.slo_ttft_ms else []
    goodput += [f"request_latency:{settings.slo_e2e_ms:g}"] if settings.slo_e2e_ms else []
    if goodput:
        command += ["--goodput", " ".join(goodput)]
    if settings.metrics_urls:
        command += ["--server-metrics", *settings.metrics_urls]
    return command


def aiperf_environment(settings: BenchSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one ``aiperf profile`` run: ``base`` (default: this process's), unbuffered,
    and, with ``metrics_urls``, the scrape kept going ``metrics_flush_s`` after the last response."""
    environment = {**(os.environ if base is None else base), "PYTHONUNBUFFERED": "1"}
    if settings.metrics_urls:
        environment["AIPERF_SERVER_METRICS_COLLECTION_FLUSH_PERIOD"] = f"{settings.metrics_flush_s:g}"
    return environment


# --- reading AIPerf's output ----------------------------------------------------------------------

def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise BenchError(f"AIPerf wrote no {path.name} in {path.parent}: see aiperf.log there") from None
    except json.JSONDecodeError as error:
        raise BenchError(f"{path}: not JSON ({error})") from None


def _percentiles(aggregate: dict[str, Any], metric: str) -> dict[str, float | None]:
    stats = aggregate.get(metric) or {}
    return {p: stats.get(p) for p in PERCENTILES}


def _records(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise BenchError(f"AIPerf wrote no {path.name} in {path.parent}: see aiperf.log there")
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _value(record: dict[str, Any], metric: str) -> float | None:
    entry = record.get("metrics", {}).get(metric)
    return entry.get("value") if isinstance(entry, dict) else None


def is_accepted(record: dict[str, Any], slo_ttft_ms: float | None, slo_e2e_ms: float | None) -> bool:
    """Completed without error, non-empty, and within both SLOs (an SLO not set does not constrain)."""
    if record.get("error"):
        return False
    tokens = _value(record, "output_sequence_length")
    ttft, e2e = _value(record, "time_to_first_token"), _value(record, "request_latency")
    if not tokens or tokens <= 0 or ttft is None or e2e is None:
        return False
    return (slo_ttft_ms is None or ttft <= slo_ttft_ms) and (slo_e2e_ms is None or e2e <= slo_e2e_ms)


def _metric(server_metrics: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """A vLLM metric's series under every spelling the endpoints exported (a plain vLLM server and
    Ray's re-export can be scraped in one run)."""
    metrics = (server_metrics or {}).get("metrics") or {}
    found = [prefix + name for prefix in METRIC_PREFIXES if prefix + name in metrics]
    if not found:
        return None
    return {"name": ", ".join(found), "series": [s for n in found for s in metrics[n].get("series", [])]}


def histogram_ms(server_metrics: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """p50/p95 (ms) of a seconds histogram over every scraped endpoint; None when none exports it
    or it recorded nothing during the profiling phase."""
    entry = _metric(server_metrics, name)
    if entry is None:
        return None
    # A series whose buckets AIPerf dropped (a counter reset during the run) is left out of the
    # sum as well as the buckets, so the mean divides like by like.
    series = [s for s in entry.get("series", []) if s.get("buckets")]
    buckets = histogram.merge(s["buckets"] for s in series)
    count = max(buckets.values(), default=0)
    p50, p95 = histogram.quantile(0.50, buckets), histogram.quantile(0.95, buckets)
    if count <= 0 or p50 is None or p95 is None:
        return None
    # The mean is exact (sum / count); the percentiles are as fine as the buckets: vLLM's NIXL
    # histogram starts at 5 ms, so a p50 of 2.5 ms reads "under 5 ms".
    total = sum((s.get("stats") or {}).get("sum") or 0.0 for s in series)
    return {"p50": _ms(p50), "p95": _ms(p95), "mean": _ms(total / count), "count": int(count),
            "metric": entry["name"]}


def kv_transfer_ms(server_metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The KV-transfer time (vLLM's NIXL histogram), merged over every prefill and decode worker."""
    return histogram_ms(server_metrics, KV_TRANSFER_METRIC)


def _counter_total(server_metrics: dict[str, Any] | None, name: str) -> float | None:
    entry = _metric(server_metrics, name)
    if entry is None:
        return None
    return sum((s.get("stats") or {}).get("total") or 0.0 for s in entry.get("series", []))


def _gauge_max(server_metrics: dict[str, Any] | None, name: str) -> float | None:
    entry = _metric(server_metrics, name)
    values = [(s.get("stats") or {}).get("max") for s in (entry or {}).get("series", [])]
    values = [v for v in values if v is not None]
    return max(values) if values else None


def pd_requests(server_metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The decode replica's count of requests per prefill path over the level: the per-series delta
    AIPerf recorded (``stats.total``, as :func:`_counter_total` reads vLLM's counters), summed over the
    series of each ``prefill`` tag (one per Ray worker); None when no scraped endpoint exports it."""
    series = (((server_metrics or {}).get("metrics") or {}).get(PD_REQUESTS_SERIES) or {}).get("series")
    if not series:
        return None
    counts = {wire.PD_LOCAL: 0.0, wire.PD_REMOTE: 0.0}
    for s in series:
        path = (s.get("labels") or {}).get(wire.PD_PATH_TAG)
        if path in counts:
            counts[path] += (s.get("stats") or {}).get("total") or 0.0
    return {"metric": PD_REQUESTS_SERIES, "series": len(series), **{k: int(v) for k, v in counts.items()}}


def _percentile(values: list[float], p: float) -> float | None:
    """Linear interpolation between the closest ranks, as AIPerf's percentiles (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def by_prefill_path(records: list[dict[str, Any]], threshold: int | None) -> dict[str, Any] | None:
    """The measured requests in two classes by the server's prompt count: ``local`` (fewer than
    ``threshold`` tokens, prefilled on the decode replica) and ``remote`` (the prefill leg), each with
    its count, share, prompt lengths and TTFT/ITL percentiles. A request without a server count (a
    failed one: no ``usage``) is ``unclassified``. None without a threshold."""
    if not threshold:
        return None
    classes: dict[str, list[dict[str, Any]]] = {wire.PD_LOCAL: [], wire.PD_REMOTE: []}
    unclassified = 0
    for record in records:
        tokens = _value(record, "input_sequence_length")
        if record.get("error") or tokens is None:
            unclassified += 1
            continue
        classes[wire.prefill_path(tokens, threshold)].append(record)  # the decode replica's rule
    classified = sum(len(rows) for rows in classes.values())

    def figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
        lengths = [_value(r, "input_sequence_length") for r in rows]
        out: dict[str, Any] = {"requests": len(rows), "share": len(rows) / classified if classified else None,
                               "prompt_tokens": {"min": min(lengths, default=None), "max": max(lengths, default=None)}}
        for key, metric in (("ttft_ms", "time_to_first_token"), ("itl_ms", "inter_token_latency")):
            values = [v for v in (_value(r, metric) for r in rows) if v is not None]
            out[key] = {p: _percentile(values, float(p[1:])) for p in PATH_PERCENTILES}
        return out

    return {"min_prompt_tokens": threshold, "prompt_tokens_source": PROMPT_TOKENS_SOURCE,
            "unclassified": unclassified, **{path: figures(rows) for path, rows in classes.items()}}


def server_figures(server_metrics: dict[str, Any] | None, endpoint_names: dict[str, str] | None = None) -> dict[str, Any] | None:
    """What the engines say about the same phase: tokens (to check the client's count), time
    queued before prefill, peak KV-cache use, and failed KV transfers."""
    if not server_metrics:
        return None
    names = endpoint_names or {}
    return {
        "endpoints": [names.get(url, url) for url in (server_metrics.get("summary") or {}).get("endpoints_successful") or []],
        "generation_tokens": _counter_total(server_metrics, "generation_tokens"),
        "prompt_tokens": _counter_total(server_metrics, "prompt_tokens"),
        "queue_time_ms": histogram_ms(server_metrics, "request_queue_time_seconds"),
        "kv_cache_usage_max": _gauge_max(server_metrics, "kv_cache_usage_perc"),
        "nixl_failed_transfers": _counter_total(server_metrics, "nixl_num_failed_transfers"),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def summarize_level(artifact_dir: Path, settings: BenchSettings, concurrency: int | None,
                    aiperf_exit_code: int = 0, endpoint_names: dict[str, str] | None = None,
                    level_utilization: dict[str, Any] | None = None) -> dict[str, Any]:
    """One ``summary.json`` entry from one AIPerf artifact directory; ``endpoint_names`` names the
    endpoints AIPerf scraped through the relay by the nodes behind it, and ``level_utilization`` is
    what :class:`.utilization.LevelMeter` read during the level (default: every figure null)."""
    aggregate_file = artifact_dir / "profile_export_aiperf.json"
    aggregate = _read_json(aggregate_file) if aggregate_file.exists() or aiperf_exit_code == 0 else {}
    records = [r for r in _records(artifact_dir / "profile_export.jsonl")
               if r.get("metadata", {}).get("benchmark_phase", "profiling") == "profiling"]
    server_file = artifact_dir / "server_metrics_export.json"
    server = _read_json(server_file) if server_file.exists() else None
    failed = sum(1 for r in records if r.get("error"))
    accepted = sum(1 for r in records if is_accepted(r, settings.slo_ttft_ms, settings.slo_e2e_ms))
    duration_s = (aggregate.get("benchmark_duration") or {}).get("avg") or 0.0
    output_tokens = sum(_value(r, "output_sequence_length") or 0 for r in records if not r.get("error"))
    # The server's prompt tokens (``--use-server-token-count``): what a per-token price bills.
    input_tokens = int(sum(_value(r, "input_sequence_length") or 0 for r in records if not r.get("error")))
    tokens_per_s = output_tokens / duration_s if duration_s > 0 else 0.0
    hourly = settings.hourly_cost_usd
    prices = (settings.price_per_million_input_tokens_usd, settings.price_per_million_output_tokens_usd)
    if settings.price_basis == PER_TOKEN:
        assert prices[0] is not None and prices[1] is not None  # both or neither (BenchSettings)
        per_million = cost.usd_per_million_output_tokens_per_token(input_tokens, int(output_tokens), *prices)
        per_accepted = cost.usd_per_accepted_response_per_token(input_tokens, int(output_tokens), *prices, accepted)
    elif hourly is not None:
        per_million = cost.usd_per_million_output_tokens(hourly, tokens_per_s)
        per_accepted = cost.usd_per_accepted_response(hourly, accepted, duration_s)
    else:
        per_million = per_accepted = None
    goodput = (aggregate.get("goodput") or {}).get("avg")
    return {
        "concurrency": concurrency,
        "requests_ok": len(records) - failed,
        "requests_failed": failed,
        "accepted_responses": accepted,
        "ttft_ms": _percentiles(aggregate, "time_to_first_token"),
        "itl_ms": _percentiles(aggregate, "inter_token_latency"),
        "e2e_ms": _percentiles(aggregate, "request_latency"),
        "output_tokens_per_s": tokens_per_s,
        "kv_transfer_ms": kv_transfer_ms(server),
        "hourly_cost_usd": hourly,
        "price_basis": settings.price_basis,
        "cost_per_million_output_tokens_usd": per_million,
        "cost_per_accepted_response_usd": per_accepted,
        "duration_s": duration_s,
        "output_tokens": output_tokens,
        "input_tokens": input_tokens,
        "accepted_responses_per_s": accepted / duration_s if duration_s > 0 else 0.0,
        "aiperf_goodput_per_s": goodput,
        "slo_ttft_ms": settings.slo_ttft_ms,
        "slo_e2e_ms": settings.slo_e2e_ms,
        "server": server_figures(server, endpoint_names),
        "by_prefill_path": by_prefill_path(records, settings.min_prompt_tokens),
        "pd_requests": pd_requests(server),
        "raw": f"{RAW_DIR}/{level_name(concurrency)}",
        "aiperf_exit_code": aiperf_exit_code,
        "utilization": level_utilization if level_utilization is not None else utilization.absent(duration_s),
    }


# --- the run --------------------------------------------------------------------------------------

KV_METRICS_WAIT_SECONDS = 60.0


def chat(settings: BenchSettings, text: str, max_tokens: int) -> None:
    """One chat completion outside AIPerf (the priming request, the warm-up under Ray)."""
    import urllib.request

    payload: dict[str, Any] = {"model": settings.model, "messages": [{"role": "user", "content": text}],
                               "max_tokens": max_tokens}
    if settings.ignore_eos:
        payload["ignore_eos"] = True
    request = urllib.request.Request(f"{settings.url.rstrip('/')}/v1/chat/completions",
                                     data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=settings.request_timeout_s) as response:
        response.read()


def warm_up(settings: BenchSettings, requests: int, concurrency: int) -> int:
    """``requests`` completions of about ``isl``/``osl`` tokens, ``concurrency`` at a time; returns
    how many failed (AIPerf's measured phase then reports the endpoint's errors)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(_: int) -> bool:
        try:
            chat(settings, "warm up " * max(1, settings.isl // 2), max_tokens=settings.osl)
            return True
        except Exception:  # noqa: BLE001 - counted, not raised
            return False

    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        return sum(1 for ok in pool.map(one, range(requests)) if not ok)


def prime_kv_metrics(settings: BenchSettings, wait_seconds: float = KV_METRICS_WAIT_SECONDS,
                     send: Callable[[], None] | None = None) -> str:
    """One request, then wait until a scraped endpoint exports vLLM's NIXL histogram.

    Under Ray Serve LLM the NIXL histograms do not exist before a replica's first transfer, and
    appear on the decode node's ``/metrics`` only at Ray's next metrics export (seen on the local
    twin, docs/twin.md). AIPerf counts a series from its first scrape in the measured phase, so
    without this the first level reads no KV-transfer time at all (and a new replica's first
    transfers are lost). Returns the line to show; never fails the run (a deployment whose
    workers export nothing still gets its latency figures)."""
    import urllib.request

    def default_send() -> None:
        chat(settings, "warm up " * 32, max_tokens=2)

    started = time.monotonic()
    try:
        (send or default_send)()
    except Exception as error:  # noqa: BLE001 - AIPerf's own run reports the endpoint's errors
        return f"KV metrics: the priming request failed ({error}); the first level may miss KV-transfer time"
    names = [prefix + KV_TRANSFER_METRIC + "_count" for prefix in METRIC_PREFIXES]
    while time.monotonic() - started < wait_seconds:
        for url in settings.metrics_urls:
            try:
                with urllib.request.urlopen(url, timeout=10) as response:
                    text = response.read().decode("utf-8", "replace")
            except Exception:  # noqa: BLE001 - an endpoint not answering yet
                continue
            if any(name in text for name in names):
                return f"KV metrics: {url} exports the NIXL histogram ({time.monotonic() - started:.0f} s)"
        time.sleep(1.0)
    return f"KV metrics: no endpoint exported the NIXL histogram within {wait_seconds:.0f} s of a request"


def run(settings: BenchSettings, out: Path, *, progress: Callable[[str], None] = lambda _: None,
        ui: str = "none") -> list[dict[str, Any]]:
    """Run every level, then the agreement prompts; write the outputs; return the summary entries.

    ``ui`` is AIPerf's ``--ui-type``: ``simple`` draws its progress bars on a terminal; with
    ``none`` its log goes to ``raw/<level>/aiperf.log`` and ``progress`` gets one line per step.
    """
    # Before anything is written or removed: a tokenizer that cannot load fails here in seconds,
    # with its reason, instead of inside AIPerf after its start-up and the Hub's retries.
    progress(check_tokenizer(settings))
    out.mkdir(parents=True, exist_ok=True)
    # A rerun into the same directory must not leave the last run's files to be read as this one's.
    for stale in (SUMMARY_FILE, AGREEMENT_FILE, RUN_FILE, PROFILE_FILE):
        (out / stale).unlink(missing_ok=True)
    shutil.rmtree(out / RAW_DIR, ignore_errors=True)
    levels: list[int | None] = [None] if settings.replay_timestamps else list(settings.concurrency)
    started = time.time()
    (out / RUN_FILE).write_text(json.dumps(run_record(settings, started), indent=2) + "\n")
    if settings.metrics_urls and (settings.deployment or {}).get("topology") == "disaggregated":
        progress(prime_kv_metrics(settings))
    relay = MetricsRelay(settings.metrics_urls)
    with relay as relayed:
        names = relay.names
        if names:  # the command lines name the relay: this says which node each stands for
            (out / RAW_DIR).mkdir(parents=True)
            (out / RAW_DIR / METRICS_RELAY_FILE).write_text(json.dumps(names, indent=2) + "\n")
        entries = _run_levels(replace(settings, metrics_urls=relayed), levels, out, endpoint_names=names,
                              progress=progress, ui=ui)
        if settings.profile_isls:
            prefill = [_run_levels(replace(settings, metrics_urls=relayed, isl=isl, osl=PREFILL_LEVEL_OSL,
                                           concurrency=(1,)), [1], out, endpoint_names=names, progress=progress,
                                   ui=ui, name=prefill_level_name(isl), write_summary=False)[0]
                       for isl in settings.profile_isls]
            (out / PROFILE_FILE).write_text(json.dumps(profile_record(settings, out, entries, prefill), indent=2,
                                                       allow_nan=False) + "\n")
    if settings.agreement_prompts:
        progress(f"agreement: {settings.agreement_prompts} greedy completions, one at a time")
        recorded = agreement.record(settings.url, settings.model, count=settings.agreement_prompts,
                                    timeout=settings.request_timeout_s)
        (out / AGREEMENT_FILE).write_text(json.dumps(recorded, indent=2) + "\n")
        errors = sum(1 for c in recorded["completions"] if c["error"])
        progress(f"agreement: {len(recorded['completions']) - errors} recorded, {errors} failed")
    _write_summary(out, entries)
    served_nothing = [e for e in entries if e["requests_ok"] == 0]
    if served_nothing:
        # AIPerf's reason for the first such level: the per-request error says which of the URL,
        # the model name or the server is wrong.
        says = _aiperf_says(_level_log(out / served_nothing[0]["raw"]))
        raise BenchIncomplete(f"no request succeeded at {', '.join(level_name(e['concurrency']) for e in served_nothing)} "
                              f"(summary.json has the errors; first check --url and --model): {settings.url}. "
                              + says.rstrip())
    return entries


def run_record(settings: BenchSettings, started_at: float) -> dict[str, Any]:
    """``run.json``: the settings, and the model served (``model``, written once, at the top)."""
    recorded = settings.to_json()
    model = recorded.pop("model_record")
    return {"settings": recorded, "model": model, "aiperf_version": AIPERF_VERSION, "started_at": started_at}


def level_meter(settings: BenchSettings) -> utilization.LevelMeter:
    """The meter of one level: every node named by a utilization URL, with what the command line knew of it."""
    names = sorted({*settings.efa_counters_urls, *settings.gpu_metrics_urls, *settings.nodes})
    return utilization.LevelMeter(settings.efa_counters_urls, settings.gpu_metrics_urls,
                                  {name: settings.nodes.get(name, {}) for name in names},
                                  gpu_interval_s=settings.gpu_sample_interval_s)


def prefill_level_name(isl: int) -> str:
    return f"prefill-isl{isl}"


def profile_record(settings: BenchSettings, out: Path, decode: list[dict[str, Any]],
                   prefill: list[dict[str, Any]]) -> dict[str, Any]:
    """``profile.json``: what the planner reads as its performance model (docs/benchmark.md, "A
    profile for the planner"). ``prefill``: TTFT by prompt length at concurrency 1 (a prompt's
    prefill, with the KV transfer on a disaggregated deployment and the first decode step);
    ``decode``: ITL by concurrency at ``isl``/``osl``. Percentiles are AIPerf's own, p90 among them."""

    def level(entry: dict[str, Any]) -> dict[str, Any]:
        aggregate_file = out / entry["raw"] / "profile_export_aiperf.json"
        aggregate = _read_json(aggregate_file) if aggregate_file.exists() else {}  # a level that served nothing
        return {"ttft_ms": {p: (aggregate.get("time_to_first_token") or {}).get(p) for p in PROFILE_PERCENTILES},
                "itl_ms": {p: (aggregate.get("inter_token_latency") or {}).get(p) for p in PROFILE_PERCENTILES},
                "requests_ok": entry["requests_ok"], "requests_failed": entry["requests_failed"], "raw": entry["raw"]}

    return {
        "format": PROFILE_FORMAT,
        "deployment": settings.deployment,
        "model": settings.model,
        "prefill": [{"isl": isl, "osl": PREFILL_LEVEL_OSL, "concurrency": 1, **level(entry)}
                    for isl, entry in zip(settings.profile_isls, prefill)],
        "decode": [{"concurrency": entry["concurrency"], "isl": settings.isl, "osl": settings.osl,
                    "output_tokens_per_s": entry["output_tokens_per_s"], **level(entry)} for entry in decode],
    }


def _run_levels(settings: BenchSettings, levels: list[int | None], out: Path, *, endpoint_names: dict[str, str],
                progress: Callable[[str], None], ui: str, name: str | None = None,
                write_summary: bool = True) -> list[dict[str, Any]]:
    """AIPerf once per level; ``settings.metrics_urls`` are the relay's (:mod:`.metrics_relay`), and
    ``endpoint_names`` the nodes behind them. ``name``: the one level's directory under ``raw/`` (a
    prefill level of a profile), which then stays out of ``summary.json``."""
    entries = []
    for index, concurrency in enumerate(levels, 1):
        artifact_dir = out / RAW_DIR / (name or level_name(concurrency))
        artifact_dir.mkdir(parents=True)
        what = ("trace timestamps" if concurrency is None else f"concurrency {concurrency}") + (
            f", prompt {settings.isl} tokens" if name else "")
        level_settings = settings
        warmup = 0 if concurrency is None else level_warmup(settings, concurrency)
        if settings.metrics_urls and warmup:
            # Ray exports the engines' metrics up to 10 s late and AIPerf starts measuring right after
            # its own warm-up: that warm-up would be counted in the level's server figures. Warm up
            # here, let one export pass, and let AIPerf measure only.
            failed = warm_up(settings, warmup, concurrency)
            progress(f"[{index}/{len(levels)}] {what}: {warmup} warm-up requests ({failed} failed), then "
                     f"{settings.metrics_flush_s:g} s for Ray's metrics export")
            time.sleep(settings.metrics_flush_s)
            level_settings = replace(settings, warmup_requests=0)
        command = aiperf_command(level_settings, concurrency, artifact_dir, ui=ui)
        progress(f"[{index}/{len(levels)}] {what}: {settings.requests if concurrency else 'trace'} requests")
        (artifact_dir / "command.txt").write_text(shlex.join(command) + "\n")
        level_started = time.monotonic()
        # The EFA counters are read just before AIPerf starts and just after it exits; the GPUs are
        # sampled in between (the window includes AIPerf's start-up: docs/benchmark.md, "Utilization").
        with open(artifact_dir / "aiperf.log", "w") as log, level_meter(settings) as meter:
            code = subprocess.run(command, stdout=None if ui != "none" else log,
                                  stderr=subprocess.STDOUT if ui == "none" else None,
                                  env=aiperf_environment(settings), check=False).returncode
        log_file = _level_log(artifact_dir)
        if code != 0:
            _check_failed_level(artifact_dir, settings, concurrency, code, what, log_file)
        entry = summarize_level(artifact_dir, settings, concurrency, aiperf_exit_code=code,
                                endpoint_names=endpoint_names, level_utilization=meter.record())
        if name:
            entry["raw"] = f"{RAW_DIR}/{name}"
        entries.append(entry)
        progress(f"[{index}/{len(levels)}] {what}: {entry['requests_ok']} ok, {entry['requests_failed']} failed, "
                 f"{entry['accepted_responses']} accepted, TTFT p50 {_fmt(entry['ttft_ms']['p50'])} ms, "
                 f"{entry['output_tokens_per_s']:.1f} output tokens/s ({time.monotonic() - level_started:.0f} s)")
        if write_summary:
            _write_summary(out, entries)
    return entries


def _check_failed_level(artifact_dir: Path, settings: BenchSettings, concurrency: int | None, code: int,
                        what: str, log_file: Path) -> None:
    """AIPerf exits 1 when every request failed, after exporting them all: that level is a result
    (nothing accepted). Any other early exit leaves a partial record file that must not be read
    as a measurement."""
    records_file = artifact_dir / "profile_export.jsonl"
    records = [r for r in _records(records_file)
               if r.get("metadata", {}).get("benchmark_phase", "profiling") == "profiling"] \
        if records_file.exists() else []
    complete = concurrency is None or len(records) >= settings.requests
    if not records or not complete or any(not r.get("error") for r in records):
        expected = f"{settings.requests} requests" if concurrency is not None else "the trace's requests"
        raise BenchIncomplete(f"aiperf exited with {code} at {what} after recording {len(records)} of "
                              f"{expected}. {_aiperf_says(log_file)}Its log: {log_file}")


def _level_log(artifact_dir: Path) -> Path:
    """AIPerf's console output (``--ui-type none``, captured here), else its own log file (``simple``:
    the console went to the terminal)."""
    captured = artifact_dir / "aiperf.log"
    return captured if captured.exists() and captured.stat().st_size else artifact_dir / "logs" / "aiperf.log"


def _write_summary(out: Path, entries: list[dict[str, Any]]) -> None:
    (out / SUMMARY_FILE).write_text(json.dumps(entries, indent=2, allow_nan=False) + "\n")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1f}"


def load_run(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any] | None]:
    """``run.json``, ``summary.json`` and ``agreement.json`` (if any) of a run directory."""
    if not (path / SUMMARY_FILE).exists():
        raise BenchError(f"{path}: no {SUMMARY_FILE}; a run directory is what `ray-llm-eks bench --out` wrote")
    run_info = _read_json(path / RUN_FILE) if (path / RUN_FILE).exists() else {}
    entries = _read_json(path / SUMMARY_FILE)
    agreement_file = path / AGREEMENT_FILE
    return run_info, entries, _read_json(agreement_file) if agreement_file.exists() else None
