"""The deployment gate's settings: how long a deploy may wait, how many probes, which thresholds.

The gate itself is :mod:`ray_llm_eks.verification`; the serving construct applies it after every
change to the serving spec and, with ``wait``, makes CloudFormation wait for its verdict
(docs/verification.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import Collector, SpecError, problem

WAIT_CONDITION_MAX_MINUTES = 720
"""``AWS::CloudFormation::WaitCondition`` ``Timeout`` is at most 43200 seconds (12 hours)."""
GATE_MARGIN_SECONDS = 120
"""The gate stops this long before the wait condition times out, so its FAILURE signal (with
the reason) reaches CloudFormation before the plain timeout does."""
PROBE_PROMPT_OVERHEAD_TOKENS = 64
"""Chat template and the probe's preamble, on top of its filler words (about one token each)."""
MAX_PROBES = 32
CONTINUOUS_EVERY_MINUTES = (5, 10, 15, 20, 30, 60)
"""How often continuous verification may run: divisors of an hour, so the CronJob schedule is
``*/N * * * *`` (or ``0 * * * *``) and every alarm period holds a whole number of runs."""


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class VerificationSpec:
    """Settings of the deployment gate. Raises :class:`~ray_llm_eks.base.SpecErrors` when built wrong."""

    __pydantic_config__ = {"extra": "forbid"}

    wait: bool = True
    """CloudFormation waits for the gate: a failed gate fails ``cdk deploy`` and rolls the stack back.
    False still runs the gate (and the rollout) after each deploy, without holding the deploy."""
    timeout_minutes: int = 60
    """The longest a deploy waits: nodes joining, image pull, model download and load, the probes.
    The planner's cold start (``ray-llm-eks plan``) is the part this deployment controls."""
    probes: int = 4
    """Streamed chat completions sent through the OpenAI Service."""
    probe_prompt_fraction: float = 0.5
    """Prompt length of each probe, as a fraction of ``max_model_len``: long enough that the
    KV cache it moves stands far above the counters' background traffic."""
    probe_max_tokens: int = 16
    """Answer length of each probe."""
    min_kv_fraction: float = 0.5
    """The EFA counters must move at least this fraction of the KV bytes the planner predicts for
    the probes (the rest is allowance for block rounding and the last token recomputed on decode)."""
    every_minutes: int | None = None
    """Continuous verification: the gate's checks again every N minutes (a CronJob, read-only: it
    never rolls out), publishing ``TransportVerified`` (1 or 0) to CloudWatch. None: only after deploys."""

    def __post_init__(self) -> None:
        found = Collector()
        if not isinstance(self.wait, bool):
            found.add(problem("wait", self.wait, "not a boolean", "true or false"))
        if not _is_int(self.timeout_minutes) or not 10 <= self.timeout_minutes <= WAIT_CONDITION_MAX_MINUTES:
            found.add(problem("timeout_minutes", self.timeout_minutes, "not a deploy timeout CloudFormation accepts "
                              "with room for a cold start", f"a whole number of minutes from 10 to "
                              f"{WAIT_CONDITION_MAX_MINUTES} (the wait condition's 12-hour maximum)"))
        if not _is_int(self.probes) or not 1 <= self.probes <= MAX_PROBES:
            found.add(problem("probes", self.probes, "not a probe count", f"1 to {MAX_PROBES}"))
        fraction = self.probe_prompt_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction < 1:
            found.add(problem("probe_prompt_fraction", fraction, "not a fraction of max_model_len",
                              "a number between 0 and 1, such as 0.5"))
        if not _is_int(self.probe_max_tokens) or not 1 <= self.probe_max_tokens <= 256:
            found.add(problem("probe_max_tokens", self.probe_max_tokens, "not an answer length for a probe", "1 to 256"))
        kv = self.min_kv_fraction
        if isinstance(kv, bool) or not isinstance(kv, (int, float)) or not 0 < kv <= 1:
            found.add(problem("min_kv_fraction", kv, "not a fraction of the predicted KV bytes", "a number in (0, 1]"))
        if self.every_minutes is not None and self.every_minutes not in CONTINUOUS_EVERY_MINUTES:
            found.add(problem("every_minutes", self.every_minutes, "not a period continuous verification can run at",
                              ", ".join(map(str, CONTINUOUS_EVERY_MINUTES)) + " (minutes), or none"))
        found.raise_if_any(self)

    @property
    def schedule(self) -> str | None:
        """The CronJob schedule of continuous verification (UTC)."""
        if self.every_minutes is None:
            return None
        return "0 * * * *" if self.every_minutes == 60 else f"*/{self.every_minutes} * * * *"

    @property
    def continuous_deadline_seconds(self) -> int:
        """A run (and its report and publish, 150 s more) ends before the next one is due."""
        return max(120, (self.every_minutes or 0) * 60 - 180)

    @property
    def timeout_seconds(self) -> int:
        return self.timeout_minutes * 60

    @property
    def gate_deadline_seconds(self) -> int:
        return self.timeout_seconds - GATE_MARGIN_SECONDS

    def probe_prompt_words(self, max_model_len: int, min_prompt_tokens: int = 0) -> int:
        """Filler words per probe prompt, so prompt plus answer stay inside ``max_model_len``; with
        ``disaggregation.min_prompt_tokens``, at least that many, so that the probe takes the prefill
        leg (each filler word is at least one token, and the preamble and chat template add more).
        :meth:`remote_probe_problem` refuses a threshold that leaves no room for that."""
        room = self._probe_room(max_model_len)
        return max(1, min(int(max_model_len * self.probe_prompt_fraction), room), min_prompt_tokens)

    def _probe_room(self, max_model_len: int) -> int:
        return max_model_len - self.probe_max_tokens - PROBE_PROMPT_OVERHEAD_TOKENS

    def remote_probe_problem(self, max_model_len: int, min_prompt_tokens: int) -> SpecError | None:
        """A ``disaggregation.min_prompt_tokens`` above which no probe prompt can take the prefill leg:
        a prompt of at least that many tokens, the probe's preamble and chat template and its answer
        must fit ``max_model_len`` (vLLM refuses a request whose prompt plus ``max_tokens`` do not).
        Without such a probe the gate could not prove the KV path."""
        room = self._probe_room(max_model_len)
        if min_prompt_tokens <= room:
            return None
        return problem("disaggregation.min_prompt_tokens", min_prompt_tokens,
                       f"leaves no room for the gate's remote-prefill probe: a prompt of at least {min_prompt_tokens} "
                       f"tokens, {PROBE_PROMPT_OVERHEAD_TOKENS} more of preamble and chat template and its "
                       f"{self.probe_max_tokens}-token answer (verification.probe_max_tokens) exceed "
                       f"model.max_model_len ({max_model_len})",
                       f"0 to {max(0, room)}, or a smaller verification.probe_max_tokens")
