"""One gate run's state, which every phase reads and adds to: the settings, the ways into the
cluster, the deadline, what the rollout found, and the report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

from .kube import ApiError, Endpoints, Kube, NoClusterAccess
from .report import Report
from .shared import wire

Sleeper = Callable[[float], None]


@dataclass
class RunState:
    config: wire.GateSettings
    kube: Kube
    endpoints: Endpoints
    report: Report
    deadline: float
    """On ``clock``'s scale: when the run must end."""
    sleep: Sleeper = time.sleep
    clock: Callable[[], float] = time.monotonic
    log: Callable[[str], None] = lambda message: None
    application: dict[str, Any] = field(default_factory=dict)
    """The Serve application as the RayService reports it (``rollout.Rollout._serve_state``)."""
    active_cluster: str = ""
    """The RayService's active RayCluster as last read (its Secret holds the Ray token)."""

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def call(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A Kubernetes call, retried on transient errors (unreachable, 5xx, 429) until the deadline."""
        while True:
            try:
                return call(*args, **kwargs)
            except (NoClusterAccess, ApiError) as error:
                if not error.transient or self.remaining() <= self.config.poll_seconds:
                    raise
                self.log(f"retrying after a transient API error: {error}")
                self.sleep(min(self.config.poll_seconds, max(0.0, self.remaining())))


class Phase:
    """A part of the run (:class:`~.rollout.Rollout`, :class:`~.checks.Checks`) over the shared state."""

    def __init__(self, state: RunState) -> None:
        self.state = state

    @property
    def config(self) -> wire.GateSettings:
        return self.state.config

    @property
    def kube(self) -> Kube:
        return self.state.kube

    @property
    def endpoints(self) -> Endpoints:
        return self.state.endpoints

    @property
    def report(self) -> Report:
        return self.state.report

    @property
    def log(self) -> Callable[[str], None]:
        return self.state.log

    @property
    def sleep(self) -> Sleeper:
        return self.state.sleep

    @property
    def clock(self) -> Callable[[], float]:
        return self.state.clock

    @property
    def application(self) -> dict[str, Any]:
        return self.state.application

    @application.setter
    def application(self, value: dict[str, Any]) -> None:
        self.state.application = value

    @property
    def active_cluster(self) -> str:
        return self.state.active_cluster

    @active_cluster.setter
    def active_cluster(self, value: str) -> None:
        self.state.active_cluster = value

    def _remaining(self) -> float:
        return self.state.remaining()

    def _kube(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return self.state.call(call, *args, **kwargs)
