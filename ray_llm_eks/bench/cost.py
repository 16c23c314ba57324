"""The cost arithmetic of a benchmark: an hourly price spread over what the hour served.

The deployment costs the same per hour whatever it serves (nodes, control plane, NAT gateway:
``ray-llm-eks plan``'s hourly total), so the cost of one accepted response at a load level is the
hourly price divided by the accepted responses that level sustains per hour. The planner's
``usd_per_million_output_tokens`` uses :func:`usd_per_million_output_tokens`: one formula.
"""

from __future__ import annotations

SECONDS_PER_HOUR = 3600


def usd_per_million_output_tokens(hourly_usd: float, output_tokens_per_s: float) -> float | None:
    """``None`` when nothing was produced (the cost of a token is then unbounded, not zero)."""
    if output_tokens_per_s <= 0:
        return None
    return hourly_usd / (output_tokens_per_s * SECONDS_PER_HOUR) * 1_000_000


def usd_per_accepted_response(hourly_usd: float, accepted_responses: int, duration_s: float) -> float | None:
    """The hourly price times the measured duration, divided by the responses accepted in it.

    ``None`` when no response was accepted: at that load the deployment buys nothing useful.
    """
    if accepted_responses <= 0 or duration_s <= 0:
        return None
    return hourly_usd * duration_s / SECONDS_PER_HOUR / accepted_responses
