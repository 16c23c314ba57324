"""What the constructs build from: one deployment's parts, composed (:func:`.composition.compose`).

A module of its own, below the cost, the spend limits and the deployment that all read it, so none
of them imports another through it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .observability import ObservabilitySpec
from .placement import DECODE, PREFILL
from .pools import SystemPool, WorkerPool
from .serving import ServingSpec
from .spend import SpendSpec
from .verification import VerificationSpec


@dataclass(frozen=True)
class Specs:
    """Everything the stack builds, as the constructs take it (:meth:`Deployment.specs`,
    ``RayLlmServing(specs=...)``, ``RayLlmServing.specs``)."""

    serving: ServingSpec
    """Holds the legs and the system pool too: ``system``, ``prefill`` and ``decode`` below are its own."""
    verification: VerificationSpec = field(default_factory=VerificationSpec)
    observability: ObservabilitySpec = field(default_factory=ObservabilitySpec)
    spend: SpendSpec | None = None
    """The spend limits, or None (no budget, no cap, no cost-allocation tag)."""

    @property
    def system(self) -> SystemPool:
        return self.serving.system

    @property
    def prefill(self) -> WorkerPool:
        return self.serving.pool(PREFILL)

    @property
    def decode(self) -> WorkerPool:
        return self.serving.pool(DECODE)

    def pool(self, role: str) -> WorkerPool:
        return self.serving.pool(role)
