"""The deployment gate: roll the pods to the deployed spec, wait for the service, and prove the path.

One run, bounded by ``deadline_seconds``, in this order (docs/verification.md):

1. **Rollout** and 2. **Ready** (:mod:`.rollout`): delete an active RayCluster whose pods run
   another cluster spec, so KubeRay builds it anew from the RayService's, then wait until the
   RayService is Ready on the expected spec and its Serve application runs the rendered config.
3. **Nodes, pods, engine**, 4. **Probes** and 5. **Transport** (:mod:`.checks`): what runs is
   what the spec says, the endpoint answers, and (disaggregated) the KV cache crossed EFA; with
   ``disaggregation.min_prompt_tokens``, each probe took the path its prompt length says (``paths``).

Each phase writes its section of the :class:`~.report.Report`; the settings are the wire
contract's :class:`GateSettings` (``gate.json``). Standard library only: it runs in the cluster,
in the serving image.
"""

from __future__ import annotations

import time
from typing import Callable

from . import metrics, objects
from .checks import Checks
from .kube import ApiError, Endpoints, Kube, NoClusterAccess
from .report import Report
from .rollout import Rollout
from .shared import wire
from .state import RunState, Sleeper


class Gate:
    """One run of the gate: :meth:`run` goes through the phases and returns the report."""

    def __init__(self, config: wire.GateSettings, kube: Kube, endpoints: Endpoints, *,
                 sleep: Sleeper = time.sleep, clock: Callable[[], float] = time.monotonic,
                 log: Callable[[str], None] = lambda message: None) -> None:
        self.state = RunState(config, kube, endpoints, Report(config), clock() + config.deadline_seconds,
                              sleep=sleep, clock=clock, log=log)
        self.rollout = Rollout(self.state)
        self.checks = Checks(self.state)

    @property
    def config(self) -> wire.GateSettings:
        return self.state.config

    @property
    def report(self) -> Report:
        return self.state.report

    def run(self) -> Report:
        config, rollout, checks = self.config, self.rollout, self.checks
        if config.wait_for_job and rollout.job_running(config.wait_for_job):
            self.report.sections["skipped"] = (f"the deploy's gate Job {config.wait_for_job} is still running; "
                                               "the pods may be mid-rollout")
            return self.report
        if config.as_deploy_job:
            self._anchor_deadline_to_job()
        cluster = rollout.wait_until_ready()
        if cluster is None:
            return self.report
        workers = checks.check_nodes_and_pods(cluster)
        checks.check_engine()
        if self.report.reasons:
            return self.report  # a pod or engine mismatch makes every later figure meaningless
        if not config.disaggregated:
            if config.state_config_map:
                checks.record_window(workers, checks.read_metrics(workers), {})
            checks.run_probes()  # colocated: no KV cache crosses the network, so no transport checks
            return self.report
        counter_pods = checks.efa_counter_pods()
        efa_before = checks.read_efa(counter_pods)
        texts_before = checks.read_metrics(workers)
        if config.state_config_map:
            checks.record_window(workers, texts_before, efa_before)
        nixl_before = {pod: metrics.NixlTotals.of(text) for pod, text in texts_before.items()}
        if not checks.run_probes():
            return self.report
        settle = min(config.metrics_settle_seconds, max(0.0, self.state.remaining()))
        if settle:
            self.state.sleep(settle)  # Ray's metrics agent exports periodically
        efa_after = checks.read_efa(counter_pods)
        texts_after = checks.read_metrics(workers)
        nixl_after = {pod: metrics.NixlTotals.of(text) for pod, text in texts_after.items()}
        checks.check_transport_logs(workers)
        checks.check_kv(efa_before, efa_after, nixl_before, nixl_after, workers)
        if config.min_prompt_tokens:
            checks.check_paths(texts_before, texts_after, workers)
        return self.report

    def _anchor_deadline_to_job(self) -> None:
        """CloudFormation's wait began when the Job was created; this process may start minutes later."""
        c, state = self.config, self.state
        try:
            created = state.kube.job(c.namespace, c.job_name)["metadata"]["creationTimestamp"]
            age = time.time() - objects.epoch(created)
        except (ApiError, NoClusterAccess, KeyError, ValueError) as error:
            self.report.warnings.append(f"cannot read Job {c.job_name}'s creation time ({error}); the deadline "
                                        "counts from this process's start")
            return
        state.deadline = min(state.deadline, state.clock() + c.deadline_seconds - max(0.0, age))
