"""Spend limits of one deployment: a monthly AWS Budgets budget on its cost-allocation tag, and a
hard cap on its hourly cost at the node groups' maximum sizes (docs/configuration.md, ``spend``).

The budget (``InferenceSpend``, constructs/spend.py) is an ``AWS::Budgets::Budget`` of type COST
whose ``CostFilters`` keep the costs tagged ``<key>=<value>``: ``{"TagKeyValue":
["user:<key>$<value>"]}``, ``user:`` marking a user-defined cost allocation tag, key and value
joined by ``$`` (the AWS CLI's own example, aws/aws-cli ``awscli/examples/budgets/create-budget.rst``).
AWS Budgets filters on a tag only once it is activated as a cost allocation tag, a manual step
(docs/deploying.md, "Spend limits and the cost allocation tag"): "You must activate tags to use
them" (AWS Cost Management user guide, ``budgets-create-filters.md``).

``max_hourly_usd`` is checked once, by :func:`~ray_llm_eks.base.composition.check_max_hourly` (it
prices the node groups, so it sits above :mod:`.cost`): the composition (``Deployment``, so ``make
synth``), ``ray-llm-eks plan`` on composed constructs, and ``InferenceSpend`` used directly all call
it, and all say the same sentence.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from .errors import Collector, SpecError, problem
from .wire import LABEL_PREFIX

COST_ALLOCATION_TAG_KEY = f"{LABEL_PREFIX}stack"
"""The one tag the stack puts on everything it creates when ``spend`` is set (value: the stack
name), the key the budget filters on. The project's other AWS tag (``ray-llm-eks/role`` on the
node groups) shares its prefix."""
DEFAULT_ACTUAL_ALERT_PERCENT = (80.0, 100.0)
"""Alerts when the month's actual cost passes 80 % of the budget (time to act) and 100 % (spent)."""
DEFAULT_FORECASTED_ALERT_PERCENT = (100.0,)
"""An alert when AWS Budgets forecasts the month will end above the budget: the earliest warning."""
MAX_NOTIFICATIONS = 10
"""AWS Budgets API reference, data type ``Notification``: "A budget can have up to ten notifications"."""
MAX_ALERT_PERCENT = 1000.0
"""A threshold above ten times the budget warns of nothing a lower one would not."""
_TAG_TEXT = re.compile(r"^[\w .:/=+\-@]*$")
"""The characters AWS accepts in tag keys and values (Tagging AWS resources, "Tag naming limits"); a
``$`` would break the budget's ``key$value`` filter, and is not among them."""


def _amount(found: Collector, field: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        found.add(problem(field, value, "not an amount in US dollars", "a number above 0, such as 5000, or leave it out"))


def _percents(found: Collector, field: str, values: Any) -> None:
    if isinstance(values, (str, bytes)) or not isinstance(values, (list, tuple)):
        found.add(problem(field, values, "not a list", "a list of percentages such as [80, 100]"))
        return
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_ALERT_PERCENT:
            found.add(problem(field, value, "not a percentage of the budget",
                              f"a number above 0 and at most {MAX_ALERT_PERCENT:g}"))
    if len(set(values)) != len(values):
        found.add(problem(field, list(values), "a threshold given twice", "each percentage once"))


@dataclass(frozen=True)
class SpendSpec:
    """Spend limits: a monthly budget with alerts on the observability topic, and an hourly cap that
    synthesis, ``plan`` and the constructs refuse to exceed (docs/configuration.md, ``spend``)."""

    __pydantic_config__ = {"extra": "forbid"}

    monthly_budget_usd: float | None = None
    """An AWS Budgets monthly COST budget, in USD, on the costs tagged with the cost-allocation tag (activate the tag first: docs/deploying.md); its alerts go to the observability SNS topic, so it needs ``observability.enabled``. Unset: no budget."""
    actual_alert_percent: tuple[float, ...] = DEFAULT_ACTUAL_ALERT_PERCENT
    """Alert when the month's actual cost passes these percentages of ``monthly_budget_usd``."""
    forecasted_alert_percent: tuple[float, ...] = DEFAULT_FORECASTED_ALERT_PERCENT
    """Alert when AWS Budgets forecasts the month's cost above these percentages of ``monthly_budget_usd``."""
    max_hourly_usd: float | None = None
    """A hard cap: the hourly cost with every GPU node group at its max_size (``plan``'s ``hourly_cost_usd_max``, the same price table) must not exceed it, or ``make synth``, ``plan`` and the constructs refuse the deployment. In a region or on a type the price table has no price for, it cannot be checked and is refused."""
    cost_allocation_tag_key: str = COST_ALLOCATION_TAG_KEY
    """The tag the stack puts on every resource it creates (and the GPU and system nodes and their volumes, through their launch templates), and the budget filters on."""
    cost_allocation_tag_value: str | None = None
    """The tag's value; unset, the CloudFormation stack name."""

    def __post_init__(self) -> None:
        found = Collector()
        for name in ("actual_alert_percent", "forecasted_alert_percent"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        _amount(found, "monthly_budget_usd", self.monthly_budget_usd)
        _amount(found, "max_hourly_usd", self.max_hourly_usd)
        _percents(found, "actual_alert_percent", self.actual_alert_percent)
        _percents(found, "forecasted_alert_percent", self.forecasted_alert_percent)
        if not found.errors:
            count = len(self.actual_alert_percent) + len(self.forecasted_alert_percent)
            if self.monthly_budget_usd is not None and count == 0:
                found.add(problem("actual_alert_percent", [], "a budget with no alert warns nobody",
                                  "at least one percentage here or in forecasted_alert_percent"))
            elif count > MAX_NOTIFICATIONS:
                found.add(problem("forecasted_alert_percent", list(self.forecasted_alert_percent),
                                  f"{count} alerts in all; AWS Budgets takes at most {MAX_NOTIFICATIONS} per budget",
                                  f"at most {MAX_NOTIFICATIONS} percentages here and in actual_alert_percent together"))
        key = self.cost_allocation_tag_key
        if not isinstance(key, str) or not 1 <= len(key) <= 128 or not _TAG_TEXT.match(key) \
                or key.lower().startswith("aws:"):
            found.add(problem("cost_allocation_tag_key", key, "not a tag key you may set",
                              "1-128 letters, digits, spaces and _ . : / = + - @, not starting with aws:"))
        value = self.cost_allocation_tag_value
        if value is not None and (not isinstance(value, str) or len(value) > 256 or not _TAG_TEXT.match(value)):
            found.add(problem("cost_allocation_tag_value", value, "not a tag value",
                              "at most 256 letters, digits, spaces and _ . : / = + - @, or leave it out (the stack name)"))
        found.raise_if_any(self)

    def tag_value(self, stack_name: str) -> str:
        """The cost-allocation tag's value for a stack of this name."""
        return self.cost_allocation_tag_value if self.cost_allocation_tag_value is not None else stack_name

    def tag_filter(self, stack_name: str) -> str:
        """The budget's ``CostFilters.TagKeyValue`` entry: ``user:<key>$<value>``."""
        return f"user:{self.cost_allocation_tag_key}${self.tag_value(stack_name)}"

    def alerts(self) -> tuple[tuple[str, float], ...]:
        """``(ACTUAL | FORECASTED, percent)`` for each alert, in order."""
        return (*(("ACTUAL", float(p)) for p in self.actual_alert_percent),
                *(("FORECASTED", float(p)) for p in self.forecasted_alert_percent))


def needs_topic_problem(spend: SpendSpec | None, observability_enabled: bool) -> SpecError | None:
    """A budget without the observability topic has nowhere to send its alerts: refused, not given
    a topic of its own with no subscriber (the alarm topic is where ``alarm_email`` subscribes)."""
    if spend is None or spend.monthly_budget_usd is None or observability_enabled:
        return None
    return problem("monthly_budget_usd", spend.monthly_budget_usd,
                   "the budget's alerts go to the observability SNS topic, and observability is disabled",
                   "observability.enabled true (its alarm_email subscribes to the topic), or no monthly_budget_usd")
