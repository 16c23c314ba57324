"""One composition: a deployment's parts made into the :class:`~.specs.Specs` the constructs build
from, with every rule that crosses parts, each written here only.

Both entry points compose through :func:`compose`, once per synth: the configuration
(:class:`~.deployment.Deployment`, so ``make synth``, ``plan``, ``preflight`` and ``verify``) and
``RayLlmServing`` given flat props. The stack hands the composed parts on as they are
(``EfaGpuNodeGroup(pool=...)``, ``SystemNodeGroup(pool=...)``, ``RayLlmServing(specs=...)``), so no
pool, leg or serving spec is built a second time and no rule runs in a second copy.

The rules that cross parts:

- observability on: the admission policy also leaves the CloudWatch agent's accounts alone
  (:data:`~.observability.AGENT_EXEMPTIONS`: the add-on's agent and Fluent Bit run with host access
  and tolerate every taint);
- ``service.client_cidrs`` outside the cluster's own VPC (:func:`~.infrastructure.client_cidrs_outside`:
  a client CIDR over the pods' addresses would admit every pod to the API);
- the :class:`~.serving.ServingSpec` on its legs and system pool (its own checks: fit, tensor
  parallelism, the KV path, scaling, pins);
- a leg that may scale to zero against continuous verification
  (:meth:`~.serving.ServingSpec.scale_to_zero_conflicts`);
- ``disaggregation.min_prompt_tokens`` against the gate's probe: a prompt of at least that many
  tokens and the probe's answer must fit ``model.max_model_len``
  (:meth:`~.verification.VerificationSpec.remote_probe_problem`);
- spend limits: a budget needs the observability topic (:func:`~.spend.needs_topic_problem`), and
  the hourly cost at every GPU node group's max size stays under ``max_hourly_usd``
  (:func:`check_max_hourly`).

Refusals name the :class:`ServingSpec`'s fields (``service.client_cidrs``, ``prefill.min_size``) and
``spend.<field>``; the configuration maps them to its own paths (``serving.client_cidrs``).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from .cost import Footprint, cost_estimate
from .errors import Collector, problem
from .infrastructure import client_cidrs_outside
from .observability import AGENT_EXEMPTIONS, ObservabilitySpec
from .placement import WORKER_ROLES
from .pricing import PriceError, PriceTable, load_price_table
from .serving import ServiceSettings, ServingSpec
from .specs import Specs
from .spend import SpendSpec, needs_topic_problem
from .verification import VerificationSpec

CLUSTER_VPC = "the cluster's VPC"
"""How a refusal names the VPC CIDRs :func:`compose` checks ``client_cidrs`` against."""


def compose(*, verification: VerificationSpec | None = None, observability: ObservabilitySpec | None = None,
            spend: SpendSpec | None = None, footprint: Footprint | None = None, vpc_cidrs: Sequence[str] = (),
            **serving: Any) -> Specs:
    """The :class:`Specs` of one deployment, every cross-part rule checked (the module's list).

    :param serving: the :class:`ServingSpec`'s fields (``region``, ``prefill``, ``decode``, ``system``,
        ``model``, ``image``, ``nixl``, ``topology``, ``service``, ``ray_version``, ``kuberay_version``,
        ``operator_namespace``, ``strict``); ``service`` as the user gave it (the agent's exemptions are
        added here).
    :param verification: the gate's settings (default ``VerificationSpec()``); its ``every_minutes``
        is continuous verification's period, or None.
    :param observability: the observability settings, or None (none on this deployment).
    :param spend: the spend limits, or None; given, ``footprint`` prices the node groups for its cap.
    :param vpc_cidrs: the cluster VPC's CIDR blocks known before deploying (``network.vpc_cidr``, or a
        construct's ``known_vpc_cidrs``): ``service.client_cidrs`` must not overlap them.

    Raises :class:`~.errors.SpecErrors` with every problem found.
    """
    if spend is not None and footprint is None:
        raise TypeError("compose(spend=...) needs footprint= (where the nodes run) to price the hourly cap")
    found = Collector()
    verification = verification if verification is not None else VerificationSpec()
    watched = observability is not None and observability.enabled
    service = serving.get("service", ServiceSettings())
    if isinstance(service, ServiceSettings):  # anything else, ServingSpec refuses by name
        found.check(check_client_cidrs, service, vpc_cidrs)
        if watched:
            serving["service"] = service.exempting(*AGENT_EXEMPTIONS)
    spec: ServingSpec | None = None
    if not found.errors:
        spec = found.check(ServingSpec, **serving)
    specs: Specs | None = None
    if spec is not None:
        found.errors.extend(spec.scale_to_zero_conflicts(verification.every_minutes))
        found.add(verification.remote_probe_problem(spec.model.max_model_len, spec.disaggregation.min_prompt_tokens))
        specs = Specs(serving=spec, verification=verification,
                      observability=observability if observability is not None else ObservabilitySpec(enabled=False),
                      spend=spend)
        if spend is not None and not found.errors:
            assert footprint is not None
            found.add(needs_topic_problem(spend, watched), prefix="spend")
            found.check(check_max_hourly, spend, specs, footprint, prefix="spend")
    found.raise_if_any()
    assert specs is not None
    return specs


def check_client_cidrs(service: ServiceSettings, vpc_cidrs: Sequence[str]) -> tuple[str, ...]:
    """``service.client_cidrs`` when none overlaps ``vpc_cidrs`` (field ``service.client_cidrs``).
    ``RayLlmServing(specs=...)`` runs it against the VPC of the cluster it is given, which the
    composition may not have known (a stack given an existing ``vpc``)."""
    return client_cidrs_outside(service.client_cidrs, list(vpc_cidrs), CLUSTER_VPC, "service.client_cidrs")


def check_max_hourly(spend: SpendSpec | None, specs: Specs, footprint: Footprint,
                     table: PriceTable | None = None) -> float | None:
    """The deployment's hourly cost at every GPU node group's max_size, checked against
    ``spend.max_hourly_usd`` (field ``max_hourly_usd``; callers add their prefix). Returns that cost
    (None without a cap). Raises :class:`SpecError` when it exceeds the cap, or when the price table
    cannot price the deployment (an unknown price cannot be held to a hard cap)."""
    if spend is None or spend.max_hourly_usd is None:
        return None
    limit = spend.max_hourly_usd
    try:
        estimate = cost_estimate(specs, footprint, table or load_price_table(), "max")
        reason = estimate.unknown_reason
    except PriceError as error:
        estimate, reason = None, str(error)
    if estimate is None or reason is not None:
        raise problem("max_hourly_usd", limit, f"cannot be checked: {reason}",
                      "a region and instance types the price table prices (ray_llm_eks/data/prices.yaml), or no "
                      "max_hourly_usd")
    hourly = estimate.hourly_usd
    assert hourly is not None
    if hourly > limit:
        sizes = ", ".join(f"{role} {specs.pool(role).max_size} x {specs.pool(role).instance_type}"
                          for role in WORKER_ROLES)
        raise problem("max_hourly_usd", limit,
                      f"the deployment costs ${hourly:.4f} per hour with every GPU node group at its max_size "
                      f"({sizes}; plan's hourly_cost_usd_max, prices as of {estimate.price_table_as_of}), above the cap",
                      f"a cap of at least {math.ceil(hourly * 100) / 100:.2f}, or lower prefill.max_size / "
                      "decode.max_size, or cheaper instance types")
    return hourly
