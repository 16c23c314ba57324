"""The cost arithmetic of a benchmark: an hourly price spread over what the hour served, or a
per-token price applied to the tokens served.

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


# --- a per-token price (a managed endpoint) -----------------------------------------------------
# A managed endpoint bills the tokens it served, not the hour: the same two figures come from
# the tokens a level served and the endpoint's two prices (US dollars per million tokens).

TOKENS_PER_PRICE_UNIT = 1_000_000


def usd_of_tokens(input_tokens: int, output_tokens: int, usd_per_million_input: float,
                  usd_per_million_output: float) -> float:
    """What the served tokens cost: ``(input_tokens x in_price + output_tokens x out_price) / 1e6``."""
    return (input_tokens * usd_per_million_input + output_tokens * usd_per_million_output) / TOKENS_PER_PRICE_UNIT


def usd_per_accepted_response_per_token(input_tokens: int, output_tokens: int, usd_per_million_input: float,
                                        usd_per_million_output: float, accepted_responses: int) -> float | None:
    """The level's token bill (:func:`usd_of_tokens`) divided by the responses accepted in it.

    Every served token is billed, also those of a response the SLOs did not accept. ``None`` when
    no response was accepted, as for an hourly price."""
    if accepted_responses <= 0:
        return None
    return usd_of_tokens(input_tokens, output_tokens, usd_per_million_input, usd_per_million_output) / accepted_responses


def usd_per_million_output_tokens_per_token(input_tokens: int, output_tokens: int, usd_per_million_input: float,
                                            usd_per_million_output: float) -> float | None:
    """The level's token bill (:func:`usd_of_tokens`) per million output tokens: the output price
    plus the input tokens' share, so it compares with an hourly deployment's figure of the same
    name. ``None`` when nothing was produced."""
    if output_tokens <= 0:
        return None
    return usd_of_tokens(input_tokens, output_tokens, usd_per_million_input,
                         usd_per_million_output) / output_tokens * TOKENS_PER_PRICE_UNIT
